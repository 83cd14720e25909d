"""OAuth settings from flags and the environment; the missing extra; the keys' refresh."""

import sys

import pytest

from taskloom.cli import main
from taskloom.commands.app import serve
from taskloom.commands.serve_settings import http_settings
from taskloom.commands.setting import Values
from taskloom.engine.errors import MissingExtraError
from taskloom.server.http import OAuthSettings
from taskloom.server.http.jwks import JwksCache, metadata_urls
from taskloom.server.http.oauth_extra import require_oauth

ISSUER = "https://id.example.com/tenant"
AUDIENCE = "https://mcp.example.com/mcp"


def _mistake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as raised:
        main(["serve", "--http", "0.0.0.0:1", *argv])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return err.removeprefix("taskloom: error: ").rstrip("\n")


def parse(argv: list[str]) -> Values:
    """The flags of ``taskloom serve ARGV``, as click parses them (and the environment)."""
    with serve.make_context("serve", argv) as ctx:
        return Values(ctx.params)


def test_flags_and_variables_make_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKLOOM_OAUTH_ISSUER", ISSUER)
    monkeypatch.setenv("TASKLOOM_OAUTH_SCOPES", "tasks:run,tasks:read")
    args = parse(["--http", "0.0.0.0:8765", "--oauth-audience", AUDIENCE])
    settings = http_settings(args, env={})
    assert settings is not None
    assert settings.tokens == {}  # OAuth alone may serve a public address
    assert settings.oauth == OAuthSettings(
        issuer=ISSUER, audience=AUDIENCE, scopes=("tasks:run", "tasks:read")
    )


def test_oauth_mistakes_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _mistake(capsys, "--oauth-issuer", ISSUER) == (
        "OAuth needs both --oauth-issuer and --oauth-audience"
    )
    both = ("--oauth-issuer", ISSUER, "--oauth-audience", AUDIENCE)
    assert _mistake(capsys, *both, "--oauth-algorithms", "RS256,HS256").startswith(
        "algorithms must be public-key ones"
    )
    assert _mistake(capsys, *both, "--oauth-algorithms", "none").endswith("not none")
    assert _mistake(
        capsys, "--oauth-issuer", "http://id.example.com", "--oauth-audience", AUDIENCE
    ) == ("issuer: must be an https URL (http only on a loopback address): 'http://id.example.com'")
    assert _mistake(capsys, *both, "--oauth-scopes", 'a"b') == "scopes: not an OAuth scope: 'a\"b'"
    assert _mistake(capsys, *both, "--oauth-leeway-s", "-1") == (
        "leeway_s: Input should be greater than or equal to 0"
    )


def test_without_the_extra_oauth_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "jwt", None)  # import jwt now fails as if absent
    with pytest.raises(MissingExtraError) as raised:
        require_oauth()
    assert raised.value.extra == "oauth"
    assert _mistake(capsys, "--oauth-issuer", ISSUER, "--oauth-audience", AUDIENCE) == (
        "OAuth needs the oauth extra: pip install 'taskloom[oauth]'"
    )


def test_metadata_urls_follow_rfc_8414_then_openid_connect() -> None:
    assert metadata_urls(ISSUER) == (
        "https://id.example.com/.well-known/oauth-authorization-server/tenant",
        "https://id.example.com/tenant/.well-known/openid-configuration",
    )


async def test_an_unknown_kid_refreshes_at_most_once_per_interval() -> None:
    now = [1000.0]
    settings = OAuthSettings(issuer=ISSUER, audience=AUDIENCE, jwks_min_refresh_s=30)
    cache = _CountingCache(settings, clock=lambda: now[0])
    assert await cache.key("k1") is None  # the first use fetches
    assert cache.fetches == 1
    assert await cache.key("unknown") is None
    now[0] += 29
    assert await cache.key("unknown") is None
    assert cache.fetches == 1  # too soon
    now[0] += 1
    assert await cache.key("unknown") is None
    assert cache.fetches == 2  # the interval passed: one more


class _CountingCache(JwksCache):
    """Fetches nothing over the network: every fetch finds an empty key set."""

    async def _fetch(self) -> dict[str | None, object]:  # type: ignore[override]
        self.fetches += 1
        return {}
