"""A JWT's ``exp`` ends what it holds open, as a stored token's expiry does: a session's
GET stream opened with it ends within 2 s of ``exp`` (plus the leeway, here 0), and the
session with it."""

import time
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest

from taskloom.server import TaskServer
from taskloom.server.http import OAuthSettings
from tests.e2e.live_streams import Session, Stream, record
from tests.server.http_support import serving
from tests.server.oauth_issuer import RESOURCE, Issuer, issuing, rsa_key

LIFETIME_S = 3


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    async with issuing(Issuer([rsa_key("rsa-1")])) as running:
        yield running


async def test_a_jwt_ends_its_session_and_streams_at_its_exp(
    task_server: TaskServer, issuer: Issuer
) -> None:
    oauth = OAuthSettings(issuer=issuer.url, audience=RESOURCE, leeway_s=0)
    token = issuer.token("ann", lifetime_s=LIFETIME_S)
    expires = anyio.current_time() + (int(time.time()) + LIFETIME_S - time.time())
    async with (
        serving(task_server, oauth=oauth) as url,
        httpx2.AsyncClient(timeout=20) as http,
        anyio.create_task_group() as group,
    ):
        session = Session(url, token)
        await session.open(http)
        stream = Stream("session GET")
        group.start_soon(record, http, stream, "GET", url, session.headers("text/event-stream"))
        with anyio.fail_after(LIFETIME_S + 5):
            await stream.opened.wait()
            assert stream.status == 200
            await stream.closed.wait()
        assert stream.ended_at is not None
        assert expires - 0.5 <= stream.ended_at <= expires + 2, stream.ended_at - expires
        group.cancel_scope.cancel()
