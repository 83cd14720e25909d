"""The dashboard mounted on the real HTTP endpoint (ADR 0030): /ui beside /mcp, bodies
bounded, and a live list's Server-Sent Events woken by the engine's change feed."""

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest

from taskloom.bootstrap import Engine
from taskloom.server import TaskServer
from taskloom.server.dashboard import live
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.mount import ui_app
from taskloom.server.http import HttpService, HttpSettings
from taskloom.server.http.authentication import Authenticator
from tests.helpers import eventually
from tests.server.http_support import ANN, BOB, TOKENS, bearer


@asynccontextmanager
async def serving_ui(
    engine: Engine, task_server: TaskServer, max_streams: int | None = None
) -> AsyncIterator[str]:
    """The endpoint with its dashboard; yields the base URL."""
    settings = HttpSettings(port=0, tokens=TOKENS, max_body_bytes=2_000)
    hub = ChangeHub()
    ui = ui_app(
        engine.manager,
        engine.runs,
        engine.workflows,
        hub,
        authenticator=Authenticator(settings),
        max_streams=max_streams,
    )
    service = HttpService(task_server, settings, ui=ui)
    following = anyio.CancelScope()

    async def follow() -> None:
        with following:
            await hub.follow(engine.manager)

    async with anyio.create_task_group() as group:
        group.start_soon(follow)
        with anyio.fail_after(10):
            port = await group.start(service.serve)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            service.stop()  # uvicorn closes its socket on the way out
            following.cancel()


async def test_ui_is_served_beside_mcp_with_bounded_bodies(
    engine: Engine, task_server: TaskServer
) -> None:
    async with serving_ui(engine, task_server) as base, httpx2.AsyncClient(timeout=10) as http:
        assert (await http.get(f"{base}/ui/")).status_code == 303
        assert (await http.get(f"{base}/ui/", headers=bearer(ANN))).status_code == 200
        assert (await http.get(f"{base}/ui")).status_code == 308
        assert (await http.post(f"{base}/mcp", json={})).status_code == 401
        assert (await http.get(f"{base}/uix")).status_code == 404
        big = await http.post(f"{base}/ui/login", data={"token": "x" * 5_000})
        assert big.status_code == 413


async def test_a_live_list_hears_of_a_new_task_from_the_change_feed(
    engine: Engine, task_server: TaskServer
) -> None:
    async with serving_ui(engine, task_server) as base, httpx2.AsyncClient(timeout=10) as http:
        headers = {"Authorization": f"Bearer {ANN}"}
        with anyio.fail_after(10):
            async with http.stream("GET", f"{base}/ui/events", headers=headers) as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                lines = events.aiter_lines()
                assert await anext(lines) == "retry: 2000"
                await engine.manager.create("countdown", {"start": 1}, owner="bob")  # not ann's
                await engine.manager.create("countdown", {"start": 1}, owner="ann")
                received = [line async for line in _until(lines, "event: change")]
        assert "event: change" in received


async def test_a_live_page_hears_at_once_of_a_change_made_before_its_stream_started(
    engine: Engine, task_server: TaskServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window between a page's render and its stream's first read (and a reconnect's
    gap): the stream opened at the page's events URL sends ``change`` at once when the
    task changed in between, with no later change to wake it; and, when nothing changed,
    nothing but keepalives."""
    monkeypatch.setattr(live, "KEEPALIVE_S", 0.05)
    task = await engine.manager.create("job", {}, owner="ann")  # no worker runs it
    headers = {"Authorization": f"Bearer {ANN}"}
    async with serving_ui(engine, task_server) as base, httpx2.AsyncClient(timeout=10) as http:

        async def first_event(events: str) -> str:
            with anyio.fail_after(10):
                async with http.stream("GET", base + events, headers=headers) as stream:
                    async for line in stream.aiter_lines():
                        if line and not line.startswith("retry:"):
                            return line
            raise AssertionError("the stream ended")

        for path in ("/ui/", f"/ui/tasks/{task.id}"):
            page = await http.get(base + path, headers=headers)
            found = re.search(r'id="live" data-events="([^"]+)"', page.text)
            assert found is not None, page.text
            events = html.unescape(found.group(1))
            assert await first_event(events) == ": keepalive", path
            await engine.manager.note_queued(task.id, f"still queued after {path}")
            assert await first_event(events) == "event: change", path


async def _until(lines: AsyncIterator[str], wanted: str) -> AsyncIterator[str]:
    async for line in lines:
        yield line
        if line == wanted:
            return


async def test_a_principal_holds_a_bounded_number_of_live_streams(
    engine: Engine, task_server: TaskServer
) -> None:
    async with (
        serving_ui(engine, task_server, max_streams=1) as base,
        httpx2.AsyncClient(timeout=10) as http,
    ):
        headers = {"Authorization": f"Bearer {ANN}"}
        with anyio.fail_after(10):
            async with http.stream("GET", f"{base}/ui/events", headers=headers) as first:
                assert first.status_code == 200
                second = await http.get(f"{base}/ui/events", headers=headers)
                assert second.status_code == 429
                assert "at most 1 each" in second.text
                other = {"Authorization": f"Bearer {BOB}"}
                async with http.stream("GET", f"{base}/ui/events", headers=other) as bobs:
                    assert bobs.status_code == 200

        async def given_back() -> bool:
            async with http.stream("GET", f"{base}/ui/events", headers=headers) as again:
                return again.status_code == 200

        await eventually(given_back)
