"""HTTP settings from flags and the environment; tokens; the rate limiter."""

import logging
from pathlib import Path

import pytest

from taskloom.cli import main
from taskloom.commands.serve_settings import server_settings
from taskloom.server.http import parse_tokens
from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.tokens import TokenTable
from tests.unit.test_oauth_options import parse

SECRET = "s3cret-token-of-ann-1234"


def _mistake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as raised:
        main(["serve", *argv])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert SECRET not in err
    return err.removeprefix("taskloom: error: ").rstrip("\n")


def test_http_flag_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the 0.0.0.0 refusal looks for stored tokens in ./taskloom.db
    assert _mistake(capsys, "--http", "8765").startswith("--http wants HOST:PORT")
    assert _mistake(capsys, "--http", "0.0.0.0:8765").startswith(
        "refusing to serve HTTP on 0.0.0.0 without tokens"
    )
    assert not list(tmp_path.iterdir())  # refused before ./taskloom.db was made
    missing = tmp_path / "none.txt"
    assert _mistake(capsys, "--http", "127.0.0.1:1", "--tokens-file", str(missing)) == (
        f"cannot read the tokens file: No such file or directory: {missing}"
    )
    bad = tmp_path / "tokens.txt"
    bad.write_text(f"# principals\nann:{SECRET}\n{SECRET}\n")
    assert _mistake(capsys, "--http", "127.0.0.1:1", "--tokens-file", str(bad)) == (
        f"{bad}: entry 3 is not 'principal:token'"
    )
    monkeypatch.setenv("TASKLOOM_TOKENS", "ann:short")
    assert _mistake(capsys, "--http", "127.0.0.1:1") == (
        "the token of 'ann' is too short (at least 16 characters)"
    )
    monkeypatch.setenv("TASKLOOM_TOKENS", f"ann:{SECRET}")
    assert _mistake(capsys, "--http", "127.0.0.1:1", "--max-body-bytes", "0") == (
        "max_body_bytes: Input should be greater than 0"
    )
    assert _mistake(capsys, "--max-result-bytes", "-1") == (
        "max_result_bytes: Input should be greater than 0"
    )


def test_tokens_come_from_lines_or_commas_and_may_not_repeat() -> None:
    text = f"ann:{SECRET}, bob:other-token-0000000\n\n# carol:commented-out\n"
    assert parse_tokens(text, source="env") == {SECRET: "ann", "other-token-0000000": "bob"}
    with pytest.raises(ValueError, match=r"^env: entry 2 \('bob'\) repeats another's token$"):
        parse_tokens(f"ann:{SECRET}\nbob:{SECRET}", source="env")


def test_a_token_table_knows_only_bearer_tokens_it_holds() -> None:
    table = TokenTable({SECRET: "ann"})
    assert table.principal(f"Bearer {SECRET}") == "ann"
    assert table.principal(f"bearer  {SECRET} ") == "ann"
    assert table.principal(f"Basic {SECRET}") is None
    assert table.principal(f"Bearer {SECRET}x") is None
    assert table.principal(None) is None
    assert not TokenTable({})


def test_the_rate_limiter_bursts_then_refills_per_key() -> None:
    now = [100.0]
    limiter = RateLimiter(6, clock=lambda: now[0])  # one every 10 s, bursts of 6
    assert [limiter.admit("ann") for _ in range(6)] == [0.0] * 6
    assert limiter.admit("ann") == pytest.approx(10.0)
    assert limiter.admit("bob") == 0.0
    now[0] += 5
    assert limiter.admit("ann") == pytest.approx(5.0)
    now[0] += 5
    assert limiter.admit("ann") == 0.0
    assert RateLimiter.retry_after(0.2) == "1"
    assert RateLimiter.retry_after(9.1) == "10"


def test_the_plain_wait_comes_from_a_flag_or_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLOOM_PLAIN_WAIT_S", "20")
    assert server_settings(parse([])).plain_wait_s == 20
    assert server_settings(parse(["--plain-wait-s", "5"])).plain_wait_s == 5
    assert server_settings(parse(["--plain-wait-s", "0"])).plain_wait_s is None
    assert _mistake(capsys, "--plain-wait-s", "-1") == (
        "plain_wait_s: Input should be greater than 0"
    )


def test_the_flags_defaults_are_the_settings_defaults() -> None:
    """The flags' defaults are the settings models' own: the help reads them there when it
    is shown (``--help`` of another command imports no server)."""
    from taskloom.commands.setting_table import BY_NAME

    helps = {name: BY_NAME[name].help_text() for name in BY_NAME}
    assert helps["max_body_bytes"].endswith("; default 1048576)")
    assert helps["rate_limit"].endswith("; default 600)")
    assert helps["max_sessions_per_principal"].endswith("; default 100)")
    assert helps["session_idle_s"].endswith("; default 300)")
    assert helps["header_timeout_s"].endswith("; default 10)")
    assert helps["max_result_bytes"].endswith("; default 16777216)")
    assert helps["plain_wait_s"].endswith("; default 45)")
    assert helps["max_unfinished_per_principal"].endswith("; default 1000)")
    assert helps["oauth_algorithms"].endswith("; default RS256,ES256)")
    assert helps["oauth_leeway_s"].endswith("; default 30)")
    assert helps["oauth_issuer"].endswith(  # required: no default
        "(env TASKLOOM_OAUTH_ISSUER; project file [serve] oauth_issuer)"
    )


def test_the_principal_limits_come_from_flags_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taskloom.commands.serve_settings import http_settings
    from tests.unit.test_oauth_options import parse as parse_serve

    monkeypatch.setenv("TASKLOOM_SESSION_IDLE_S", "60")
    args = parse_serve(
        [
            "--http",
            "127.0.0.1:8765",
            "--max-sessions-per-principal",
            "7",
            "--header-timeout-s",
            "2.5",
            "--max-unfinished-per-principal",
            "0",
        ]
    )
    http = http_settings(args, env={"TASKLOOM_TOKENS": f"ann:{SECRET}"})
    assert http is not None
    assert (http.max_sessions_per_principal, http.session_idle_s, http.header_timeout_s) == (
        7,
        60.0,
        2.5,
    )
    assert server_settings(args).max_unfinished_per_principal is None  # 0: no limit
    assert server_settings(parse_serve([])).max_unfinished_per_principal == 1_000


def test_the_ui_refusal_names_only_what_ui_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``taskloom ui`` on a non-loopback address without tokens says how to give it some:
    TASKLOOM_TOKENS or a stored token (it has no ``--tokens-file``, which serve has)."""
    import anyio

    from taskloom.persistence.sqlite import SqliteTaskStore

    db = tmp_path / "tasks.db"

    async def create() -> None:
        async with SqliteTaskStore.open(db):
            pass

    anyio.run(create)
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:  # ui sets up the process's logging on stderr, which pytest closes after the test
        with pytest.raises(SystemExit) as raised:
            main(["ui", "--host", "0.0.0.0", "--port", "0", "--db", str(db)])
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("taskloom: error: refusing to serve HTTP on 0.0.0.0 without tokens")
    assert "TASKLOOM_TOKENS" in err
    assert "--tokens-file" not in err
