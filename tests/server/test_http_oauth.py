"""OAuth over real HTTP: JWTs of a test issuer on 127.0.0.1, checked by the endpoint."""

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from taskloom.server import TaskServer
from taskloom.server.http import OAuthSettings
from tests.server.http_support import ANN, bearer, http_client, initialize_body, serving
from tests.server.oauth_issuer import RESOURCE, Issuer, ec_key, issuing, rsa_key

METADATA = "https://mcp.test/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {"rsa": rsa_key("rsa-1"), "ec": ec_key("ec-1"), "stranger": rsa_key("rsa-1")}


@pytest.fixture
async def issuer(keys: dict[str, Any]) -> AsyncIterator[Issuer]:
    async with issuing(Issuer([keys["rsa"], keys["ec"]])) as running:
        yield running


def oauth(issuer: Issuer, **settings: Any) -> OAuthSettings:
    return OAuthSettings(issuer=issuer.url, audience=RESOURCE, **settings)


@pytest.fixture
async def url(task_server: TaskServer, issuer: Issuer) -> AsyncIterator[str]:
    async with serving(task_server, oauth=oauth(issuer)) as endpoint:
        yield endpoint


async def _initialize(url: str, token: str | None) -> httpx2.Response:
    headers = bearer(token) if token is not None else {"Accept": "application/json"}
    async with httpx2.AsyncClient(timeout=20) as http:
        return await http.post(url, json=initialize_body(), headers=headers)


async def test_a_valid_token_acts_as_its_sub_and_only_its_sub_sees_the_task(
    url: str, issuer: Issuer, keys: dict[str, Any]
) -> None:
    ann, bob = issuer.token("ann"), issuer.token("bob", key=keys["ec"])  # RS256 and ES256
    async with http_client(url, ann) as client, http_client(url, bob) as other:
        task_id = await client.start("gated", {"gate": "oauth-ann"})
        assert (await client.get(task_id))["taskId"] == task_id
        error = await other.error("tasks/get", {"taskId": task_id})
        assert error.message == f"Task not found: {task_id}"
        assert [t["taskId"] for t in (await client.list_tasks())["tasks"]] == [task_id]
        assert (await other.list_tasks())["tasks"] == []
    async with http_client(url, issuer.token("ann")) as again:  # a new token, the same sub
        assert (await again.get(task_id))["taskId"] == task_id
    assert issuer.jwks_fetches == 1


@pytest.mark.parametrize(
    "case",
    ["expired", "wrong audience", "wrong issuer", "wrong key", "alg none", "no sub", "not a JWT"],
)
async def test_a_bad_token_is_refused_with_401_naming_the_metadata(
    url: str, issuer: Issuer, keys: dict[str, Any], case: str
) -> None:
    makers: dict[str, Callable[[], str]] = {
        "expired": lambda: issuer.token(lifetime_s=-120),  # beyond the 30 s leeway
        "wrong audience": lambda: issuer.token(aud="https://other.test/mcp"),
        "wrong issuer": lambda: issuer.token(iss="http://127.0.0.1:1/other"),
        "wrong key": lambda: issuer.token(key=keys["stranger"]),  # same kid, other key
        "alg none": issuer.unsigned_token,
        "no sub": lambda: issuer.token(sub=""),
        "not a JWT": lambda: "x" * 40,
    }
    token = makers[case]()
    response = await _initialize(url, token)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer realm="taskloom", resource_metadata="{METADATA}", error="invalid_token"'
    )
    assert response.json()["error"]["message"] == "Unauthorized: the bearer token is not valid"
    assert token not in response.text


async def test_no_token_gets_the_challenge_and_the_metadata_is_served(
    url: str, issuer: Issuer
) -> None:
    response = await _initialize(url, None)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        f'Bearer realm="taskloom", resource_metadata="{METADATA}"'
    )
    origin = url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=20) as http:
        suffixed = await http.get(origin + "/.well-known/oauth-protected-resource/mcp")
        root = await http.get(origin + "/.well-known/oauth-protected-resource")
        other = await http.get(origin + "/.well-known/oauth-authorization-server")
    assert suffixed.status_code == root.status_code == 200
    document = suffixed.json()
    assert document == root.json()
    assert document["resource"] == RESOURCE
    assert document["authorization_servers"] == [issuer.url]
    assert document["bearer_methods_supported"] == ["header"]
    assert "scopes_supported" not in document
    assert other.status_code == 404


async def test_an_unknown_kid_fetches_the_keys_once_more_at_most_per_interval(
    task_server: TaskServer, issuer: Issuer
) -> None:
    rotated = rsa_key("rsa-2")
    settings = oauth(issuer, jwks_min_refresh_s=3600)
    async with serving(task_server, oauth=settings) as url:
        assert (await _initialize(url, issuer.token())).status_code == 200
        assert issuer.jwks_fetches == 1
        issuer.published.append(rotated)  # rotated since the keys were fetched
        refused = await _initialize(url, issuer.token(key=rotated))
        assert refused.status_code == 401  # fetched too recently to fetch again
        assert issuer.jwks_fetches == 1
    async with serving(task_server, oauth=oauth(issuer, jwks_min_refresh_s=0)) as url:
        issuer.published.remove(rotated)
        assert (await _initialize(url, issuer.token())).status_code == 200
        fetched = issuer.jwks_fetches
        issuer.published.append(rotated)
        assert (await _initialize(url, issuer.token(key=rotated))).status_code == 200
        assert issuer.jwks_fetches == fetched + 1  # one refresh for the new kid
        assert (await _initialize(url, issuer.token(key=rotated))).status_code == 200
        assert issuer.jwks_fetches == fetched + 1  # and then it is known


async def test_a_required_scope_missing_is_403(task_server: TaskServer, issuer: Issuer) -> None:
    settings = oauth(issuer, scopes=("tasks:run",))
    async with serving(task_server, oauth=settings) as url:
        without = await _initialize(url, issuer.token(scope="profile"))
        with_scope = await _initialize(url, issuer.token(scope="profile tasks:run"))
        as_list = await _initialize(url, issuer.token(scp=["tasks:run"]))
        async with httpx2.AsyncClient() as http:
            origin = url.removesuffix("/mcp")
            document = (await http.get(origin + "/.well-known/oauth-protected-resource/mcp")).json()
    assert without.status_code == 403
    assert without.headers["www-authenticate"] == (
        f'Bearer realm="taskloom", error="insufficient_scope", resource_metadata="{METADATA}", '
        'scope="tasks:run"'
    )
    assert without.json()["error"]["message"] == "Forbidden: the token lacks the scope tasks:run"
    assert (with_scope.status_code, as_list.status_code) == (200, 200)
    assert document["scopes_supported"] == ["tasks:run"]


async def test_static_tokens_keep_working_alongside(
    task_server: TaskServer, issuer: Issuer
) -> None:
    settings: dict[str, Any] = {"tokens": {ANN: "ann"}, "oauth": oauth(issuer)}
    async with serving(task_server, **settings) as url:
        async with http_client(url, ANN) as static:
            task_id = await static.start("gated", {"gate": "oauth-static"})
        async with http_client(url, issuer.token("ann")) as jwt_ann:
            assert (await jwt_ann.get(task_id))["taskId"] == task_id  # one namespace


async def test_an_unreachable_issuer_is_503_and_never_logs_the_token(
    task_server: TaskServer, caplog: pytest.LogCaptureFixture, issuer: Issuer
) -> None:
    settings = oauth(issuer, jwks_url="http://127.0.0.1:1/jwks", jwks_timeout_s=5)
    token = issuer.token()
    with caplog.at_level(logging.DEBUG):
        async with serving(task_server, oauth=settings) as url:
            response = await _initialize(url, token)
    assert response.status_code == 503
    assert "keys cannot be fetched" in response.json()["error"]["message"]
    assert token not in caplog.text


async def test_a_wrong_token_cannot_open_a_session_with_the_sdk_client(url: str) -> None:
    with pytest.RaisesGroup(
        pytest.RaisesExc(MCPError, match="^Unauthorized: "), flatten_subgroups=True
    ):
        async with http_client(url, "not-a-jwt-and-not-a-token"):
            pass
