"""A live page shows a change made between its render and its stream's start, in a real
Chromium against a real ``taskloom serve --http``: the page's events request is held
(``page.route``) while another tab changes the task, then let through; the page must
show the change with no later change to wake its stream (the page names what it shows,
``?seen=``, and the stream compares its first read with that)."""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest

from tests.e2e.browser import require_browser
from tests.e2e.test_dashboard_browser import (
    WAIT_MS,
    chromium,
    serving,
    sign_in,
    until_node,
    until_task,
)
from tests.helpers import free_port
from tests.server.http_support import ANN, http_client

if TYPE_CHECKING:
    from playwright.async_api import Page, Route

pytestmark = pytest.mark.slow


def _events(url: str) -> bool:
    return urlsplit(url).path.endswith("/events")


def _seen(url: str) -> str:
    [seen] = parse_qs(urlsplit(url).query)["seen"]
    return seen


async def _shows(page: "Page") -> str:
    """The digest of what *page*'s live region shows, as its events URL names it."""
    events = await page.locator("#live").get_attribute("data-events")
    assert events is not None
    return _seen(events)


async def _row_shows(page: "Page", task_id: str, state: str) -> None:
    """Until *page*'s list shows *task_id* in *state* (bounded)."""
    pill = f'tr[data-task="{task_id}"] td.state .pill:text("{state}")'
    await page.locator(pill).wait_for(timeout=WAIT_MS)


async def _held(page: "Page") -> tuple[anyio.Event, Callable[[], int]]:
    """Holds *page*'s events requests until the event returned is set; the count of
    those asked for so far."""
    released = anyio.Event()
    asked = 0

    async def held(route: "Route") -> None:
        nonlocal asked
        asked += 1
        await released.wait()
        await route.continue_()

    await page.route(_events, held)
    return released, lambda: asked


async def test_a_page_shows_a_change_made_before_its_stream_started(tmp_path: Path) -> None:
    require_browser()
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            async with http_client(server.mcp, ANN) as mcp:
                asking = await mcp.start("sign_off", {})
                crawl = await mcp.start("crawl", {})
            other = await sign_in(browser, server, ANN)  # the tab that changes things
            reader = await sign_in(browser, server, ANN)

            # A task page: rendered with the first question; the second comes before its
            # stream starts (no change follows: the run waits for the answer).
            await other.goto(f"{server.base}/tasks/{asking}")
            await other.get_by_label("Reviewer").wait_for()
            released, asked = await _held(reader)
            try:
                await reader.goto(f"{server.base}/tasks/{asking}")
                await reader.get_by_label("Reviewer").wait_for()
                assert asked() == 1  # the stream waits, held
                await other.get_by_label("Reviewer").fill("dana")
                await other.get_by_role("button", name="Answer").click()
                await other.get_by_label("Signer").wait_for()
                await until_task(other, "input_required")
            finally:
                released.set()  # never a request held past a failure
            await reader.get_by_label("Signer").wait_for(timeout=WAIT_MS)
            assert await reader.get_by_label("Reviewer").count() == 0
            await reader.unroute(_events)

            # The list: rendered with the crawl running; it is cancelled before the
            # list's stream starts (a cancelled run changes no more).
            await other.goto(f"{server.base}/tasks/{crawl}")
            await until_node(other, "walk", "running")
            state = reader.locator(f'tr[data-task="{crawl}"] td.state .pill')
            released, asked = await _held(reader)
            try:
                await reader.goto(f"{server.base}/")
                assert await state.inner_text() == "running"
                assert asked() == 1
                await other.get_by_role("button", name="Cancel run").click()
                await until_task(other, "cancelled")
            finally:
                released.set()
            await _row_shows(reader, crawl, "cancelled")
            await reader.unroute(_events)

            # A dropped stream: the page reconnects naming what it shows then, not what
            # it showed when it loaded. The first stream (a stand-in) tells of a change
            # made while it was held, then drops; the real one follows.
            released, reconnected = anyio.Event(), anyio.Event()
            again: list[str] = []

            async def dropped(route: "Route") -> None:
                if not released.is_set():
                    await released.wait()
                    body = "retry: 2000\n\nevent: change\ndata: {}\n\n"
                    await route.fulfill(body=body, content_type="text/event-stream")
                    return
                again.append(route.request.url)
                reconnected.set()
                await route.continue_()

            await reader.route(_events, dropped)
            try:
                await reader.goto(f"{server.base}/")
                loaded = await _shows(reader)
                await other.goto(f"{server.base}/tasks/{asking}")
                await other.get_by_label("Signer").fill("lee")
                await other.get_by_role("button", name="Answer").click()
                await until_task(other, "completed")
            finally:
                released.set()
            await _row_shows(reader, asking, "completed")
            with anyio.fail_after(WAIT_MS / 1000):
                await reconnected.wait()
            await other.goto(f"{server.base}/")
            now = await _shows(other)
            assert now != loaded
            assert await _shows(reader) == now
            assert [_seen(url) for url in again] == [now]


async def test_a_page_connects_again_when_its_server_comes_back(tmp_path: Path) -> None:
    """The server stops (its streams' last event: ``stopping``) and starts again on the
    same address: the open page connects again, naming what it shows, and shows a change
    made once the new server runs (with no later change to wake it). A stream that ended
    with ``end`` would never have been opened again."""
    require_browser()
    address = f"127.0.0.1:{free_port()}"
    streams = 0
    connected = anyio.Event()

    async def counted(route: "Route") -> None:
        nonlocal streams
        streams += 1
        connected.set()
        await route.continue_()

    with anyio.fail_after(90):
        async with chromium() as browser:
            async with serving(tmp_path, address) as first:
                async with http_client(first.mcp, ANN) as mcp:
                    asking = await mcp.start("sign_off", {})
                reader = await sign_in(browser, first, ANN)
                await reader.route(_events, counted)
                await reader.goto(f"{first.base}/tasks/{asking}")
                await reader.get_by_label("Reviewer").wait_for()
                await connected.wait()
            async with serving(tmp_path, address) as second:
                other = await sign_in(browser, second, ANN)
                await other.goto(f"{second.base}/tasks/{asking}")
                await other.get_by_label("Reviewer").fill("dana")
                await other.get_by_role("button", name="Answer").click()
                await other.get_by_label("Signer").wait_for()
                # the page tries again after waits doubling up to 30 s: its next try is
                # within 30 s of the server answering
                await reader.get_by_label("Signer").wait_for(timeout=WAIT_MS + 30_000)
            assert streams >= 2
