"""An issuer whose key set hangs or fails cannot multiply fetches or waits: many JWT
requests at once share one fetch, each is answered within ``jwks_timeout_s`` (503 with
``Retry-After``), failures are backed off, and the first request after the backoff
once the issuer is back succeeds. A key set that never ends is cut at 1 MiB as it is
read."""

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest

from taskloom.server import TaskServer
from taskloom.server.http import OAuthSettings
from taskloom.server.http.jwks import MAX_DOCUMENT_BYTES, JwksCache, KeysUnavailable
from tests.server.http_support import bearer, initialize_body, serving
from tests.server.oauth_issuer import RESOURCE, Issuer, issuing, rsa_key

TIMEOUT_S = 1.0
SLACK_S = 1.5
"""What a loaded test machine may add to the limit."""
CONCURRENT = 20


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with issuing(Issuer([rsa_key("rsa-1")])) as running:
        yield running


def _oauth(issuer: Issuer) -> OAuthSettings:
    return OAuthSettings(issuer=issuer.url, audience=RESOURCE, jwks_timeout_s=TIMEOUT_S)


async def _initialize(http: httpx2.AsyncClient, url: str, token: str) -> tuple[float, Any]:
    started = time.monotonic()
    response = await http.post(url, json=initialize_body(), headers=bearer(token))
    return time.monotonic() - started, response


async def _at_once(url: str, tokens: list[str]) -> list[tuple[float, httpx2.Response]]:
    answers: list[tuple[float, httpx2.Response]] = []
    async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as group:
        for token in tokens:

            async def one(token: str = token) -> None:
                answers.append(await _initialize(http, url, token))

            group.start_soon(one)
    return answers


@pytest.mark.parametrize("outage", ["hang", "500"])
async def test_an_outage_of_the_issuer_costs_one_fetch_and_at_most_the_limit_each(
    task_server: TaskServer, issuer: Issuer, outage: str
) -> None:
    issuer.outage = outage
    async with serving(task_server, oauth=_oauth(issuer)) as url:
        tokens = [issuer.token(f"user-{n}") for n in range(CONCURRENT)]
        answers = await _at_once(url, tokens)
        assert len(answers) == CONCURRENT
        for elapsed, response in answers:
            assert response.status_code == 503
            assert int(response.headers["Retry-After"]) >= 1
            assert elapsed < TIMEOUT_S + SLACK_S, f"answered after {elapsed:.2f} s"
        assert issuer.jwks_fetches == 1  # shared by every waiter

        during = await _at_once(url, tokens[:5])  # backed off: refused at once, no fetch
        assert all(response.status_code == 503 for _, response in during)
        assert all(elapsed < SLACK_S for elapsed, _ in during)
        assert issuer.jwks_fetches == 1

        issuer.outage = None
        retry_after = max(int(response.headers["Retry-After"]) for _, response in during)
        with anyio.fail_after(retry_after + 5):
            while True:
                _, response = (await _at_once(url, tokens[:1]))[0]
                if response.status_code != 503:
                    break
                await anyio.sleep(0.1)
        assert response.status_code == 200  # the first request after the backoff
        assert issuer.jwks_fetches == 2


async def test_failures_are_backed_off_longer_each_time_up_to_30_s() -> None:
    now = [1000.0]
    settings = OAuthSettings(issuer="https://id.example.com", audience=RESOURCE)
    cache = _FailingCache(settings, clock=lambda: now[0])
    waits = []
    for _ in range(8):
        with pytest.raises(KeysUnavailable) as refused:
            await cache.key("k1")
        waits.append(refused.value.retry_after_s)
        with pytest.raises(KeysUnavailable):
            await cache.key("k1")  # within the backoff: no fetch
        now[0] += refused.value.retry_after_s
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30]
    assert cache.fetches == 8


async def test_a_key_set_that_never_ends_is_cut_at_the_bound_as_it_is_read(issuer: Issuer) -> None:
    issuer.outage = "endless"
    cache = JwksCache(OAuthSettings(issuer=issuer.url, audience=RESOURCE, jwks_timeout_s=30))
    started = time.monotonic()
    with pytest.raises(KeysUnavailable, match=f"more than {MAX_DOCUMENT_BYTES} bytes"):
        await cache.key("rsa-1")
    assert time.monotonic() - started < 10  # not the 30 s limit: cut while reading


class _FailingCache(JwksCache):
    """Every fetch fails."""

    async def _fetch(self) -> dict[str | None, Any]:
        self.fetches += 1
        raise KeysUnavailable("the issuer answered HTTP 500")
