"""``taskloom tokens create|list|revoke``: shown once, listed without secrets, revoked."""

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.test_commands import cli


def test_create_prints_the_token_once_and_stores_only_its_hash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    code, out, err = cli(
        capsys, "tokens", "create", "--principal", "ann", "--scope", "read", "--db", db
    )
    token = out.strip()
    assert code == 0
    assert token.startswith("tl_")
    assert "shown only this once" in err
    assert token not in err
    token_id, secret = token[3:15], token[16:]
    with sqlite3.connect(db) as raw:
        rows = raw.execute("SELECT id, hash, scopes FROM tokens").fetchall()
        dump = "\n".join(raw.iterdump())
    assert rows == [(token_id, hashlib.sha256(secret.encode()).hexdigest(), '["read"]')]
    assert secret not in dump
    code, out, _ = cli(capsys, "tokens", "list", "--db", db, "--json")
    (listed,) = json.loads(out)
    assert (listed["id"], listed["principal"], listed["scopes"], listed["state"]) == (
        token_id,
        "ann",
        ["read"],
        "active",
    )
    assert secret not in out
    code, out, _ = cli(capsys, "tokens", "revoke", token_id, "--db", db)
    assert (code, out) == (0, f"token {token_id} of ann is revoked\n")
    code, out, _ = cli(capsys, "tokens", "list", "--db", db)
    assert out.split()[-1] == "revoked"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("create", "--principal", "ann", "--scope", "write"), "unknown scope 'write'"),
        (("create", "--principal", "ann", "--expires", "soon"), "--expires wants N"),
        (("create", "--principal", "", "--expires", "1d"), "a principal is a printable name"),
        (("revoke", "0123456789ab"), "no token with id '0123456789ab'"),
    ],
)
def test_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "db", "migrate", "--db", db)
    code, _, err = cli(capsys, "tokens", *argv, "--db", db)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
