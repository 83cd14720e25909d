"""A live page that is not live says so, in a real Chromium against a real ``taskloom
serve --http``: refused for a while (too many live pages, a server stopping) it says
"paused" with the server's reason and tries again, waiting longer each time (1 s doubled
up to 30 s, half of it random, or the server's ``Retry-After``); refused for good (signed
out) it says "stopped" and waits for a reload. A hung redraw does not keep it from
connecting again. The page's clock is Playwright's (``page.clock``), paused: the waits are read from
the page and run through, never slept."""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest

from taskloom.server.dashboard.access import COOKIE
from tests.e2e.browser import require_browser
from tests.e2e.test_dashboard_browser import WAIT_MS, Server, chromium, serving, sign_in
from tests.helpers import eventually, free_port
from tests.server.http_support import ANN, bearer, http_client

if TYPE_CHECKING:
    from playwright.async_api import Page, Request, Route

pytestmark = pytest.mark.slow

MAX_STREAMS = 20
"""Live streams a principal may hold (``taskloom.server.dashboard.streams``)."""
STREAM = "retry: 2000\n\n"
"""An event stream that opens and closes at once."""
PROVEN_MS = 10_000
"""How long after it opened a stream must still read to prove itself (``app.js``)."""
Answer = tuple[int, str, dict[str, str]]
"""An answer to an events request: status, body, headers."""


async def _paused_clock(page: "Page") -> None:
    """*page*'s timers fire only when the test runs them (Playwright's clock, paused)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    await page.clock.install(time=start)
    await page.clock.pause_at(start + timedelta(minutes=1))


def _events(url: str) -> bool:
    return urlsplit(url).path.endswith("/events")


def _fragment(url: str) -> bool:
    return "fragment=1" in urlsplit(url).query


async def _status(page: "Page", state: str, attempts: int | None = None) -> str:
    """Until *page*'s live status is *state* (after *attempts* failures in a row, if
    given): its text, "" when hidden (bounded)."""
    selector = f'#live-status[data-state="{state}"]'
    if attempts is not None:
        selector += f'[data-attempts="{attempts}"]'
    found = page.locator(selector)
    await found.wait_for(state="attached", timeout=WAIT_MS)
    return await found.inner_text() if await found.is_visible() else ""


async def _attempts(page: "Page") -> str | None:
    return await page.locator("#live-status").get_attribute("data-attempts")


async def _state(page: "Page") -> str | None:
    return await page.locator("#live-status").get_attribute("data-state")


async def _round_trip(page: "Page") -> None:
    """A request of *page*'s own, answered: what its timers started is asked for by now."""
    await page.evaluate("() => fetch('/ui/static/app.css').then((response) => response.ok)")


async def _wait_ms(page: "Page") -> int:
    """The wait *page* set before it connects again."""
    waited = await page.locator("#live-status").get_attribute("data-retry-ms")
    assert waited is not None
    return int(waited)


def _redraws(page: "Page") -> list[str]:
    """The redraws (fragment requests) of *page* under way from now on: each request's
    URL, until it is answered or fails."""
    under_way: list[str] = []

    def asked(request: "Request") -> None:
        if _fragment(request.url):
            under_way.append(request.url)

    def over(request: "Request") -> None:
        if _fragment(request.url) and request.url in under_way:
            under_way.remove(request.url)

    page.on("request", asked)
    page.on("requestfinished", over)
    page.on("requestfailed", over)
    return under_way


async def _none(under_way: list[str]) -> bool:
    return not under_way


@asynccontextmanager
async def _all_streams(server: Server) -> AsyncIterator[list[Callable[[], Awaitable[None]]]]:
    """As many of ann's live streams held open as the server gives (until one is
    refused); each item closes one."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=WAIT_MS / 1000))
        closers: list[Callable[[], Awaitable[None]]] = []
        for _ in range(MAX_STREAMS + 1):
            held = AsyncExitStack()
            events = await held.enter_async_context(
                http.stream("GET", f"{server.base}/events", headers=bearer(ANN))
            )
            stack.push_async_callback(held.aclose)
            if events.status_code == 429:
                break
            assert events.status_code == 200  # its slot is taken (nothing read: reading
            # through an iterator that is then dropped would close the stream)
            closers.append(held.aclose)
        else:
            raise AssertionError(f"more than {MAX_STREAMS} streams given")
        yield closers


async def test_a_page_says_when_it_is_not_live_and_why(tmp_path: Path) -> None:
    """Too many live pages: "paused", the server's reason, and tries again until a slot
    is free; then live (the line goes, a new task shows). The server stops and comes back
    with the reader signed out (no answer meanwhile): "stopped" with a reload link, and no
    more tries."""
    require_browser()
    address = f"127.0.0.1:{free_port()}"
    with anyio.fail_after(120):
        async with chromium() as browser:
            async with serving(tmp_path, address) as first:
                signed = await sign_in(browser, first, ANN)  # its list holds a stream
                reader = await signed.context.new_page()
                reader.set_default_timeout(WAIT_MS)
                await _paused_clock(reader)
                async with _all_streams(first) as closers:
                    await reader.goto(f"{first.base}/")
                    text = await _status(reader, "retrying", 1)
                    assert text == (
                        "Live updates paused: Too many live pages open (at most 20 each); "
                        "close some; reconnecting\u2026"
                    )
                    await closers[0]()
                    for attempts in range(1, 8):  # the slot is given back once the
                        # server sees the stream gone: at once, or at its next keepalive
                        await reader.clock.run_for(await _wait_ms(reader))
                        await reader.locator(
                            f'#live-status[data-state="live"], '
                            f'#live-status[data-attempts="{attempts + 1}"]'
                        ).wait_for(state="attached", timeout=WAIT_MS)
                        if await _state(reader) == "live":
                            break
                    assert await _status(reader, "live") == ""
                # Live, but its failures in a row stand until the stream proves itself:
                # something read from it 10 s after it opened (ADR 0069).
                assert await _attempts(reader) != "0"
                await reader.clock.run_for(PROVEN_MS)
                redraws = _redraws(reader)
                async with http_client(first.mcp, ANN) as mcp:
                    made = await mcp.start("sign_off", {})
                # drawn in its last state (it asks and waits), and no redraw left in flight
                # to fail first when the server stops ("could not be redrawn"): the task's
                # changes come in a burst, and one read during a redraw makes another
                settled = f'tr[data-task="{made}"] td.state .pill.input_required'
                await reader.locator(settled).wait_for(timeout=WAIT_MS)
                await _round_trip(reader)  # a redraw the last one started is asked for
                await eventually(lambda: _none(redraws), within_s=WAIT_MS / 1000)
                assert await _status(reader, "live", 0) == ""  # the change proved it
            text = await _status(reader, "retrying", 1)
            assert text == "Live updates paused: the server stopped; reconnecting\u2026"
            await reader.clock.run_for(await _wait_ms(reader))
            text = await _status(reader, "retrying", 2)
            assert text == "Live updates paused: no answer from the server; reconnecting\u2026"

            await reader.context.clear_cookies()
            async with serving(tmp_path, address):
                await reader.clock.run_for(await _wait_ms(reader))
                text = await _status(reader, "stopped")
                assert text == "Live updates stopped: Sign in first. Reload to try again."
                reload = reader.locator("#live-status a")
                assert await reload.get_attribute("href") == f"{first.base}/"
                streams = 0

                def counted(route: "Route") -> object:
                    nonlocal streams
                    streams += 1
                    return route.continue_()

                await reader.route(_events, counted)
                await reader.clock.run_for(120_000)
                await _round_trip(reader)
                assert streams == 0
                await reload.click()
                await reader.wait_for_url(f"{first.base}/login")


async def _refusing(page: "Page", answers: list[Answer]) -> None:
    """*page*'s events requests answered from *answers* (status, body, headers) in turn."""

    async def answer(route: "Route") -> None:
        status, body, headers = answers.pop(0)
        kind = "text/event-stream" if status == 200 else "text/html"
        kind = "application/json" if body.startswith("{") else kind
        await route.fulfill(status=status, body=body, content_type=kind, headers=headers)

    await page.route(_events, answer)


def _refusal(message: str) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}})


async def test_reconnects_wait_longer_each_time_even_after_a_stream_that_closes_at_once(
    tmp_path: Path,
) -> None:
    """``Math.random`` is 0 here: each wait is half of the doubling one (0.5 s to 15 s),
    or the server's ``Retry-After`` when longer. A stream that opens and closes at once
    does not start the waits over (it has not proved itself, ADR 0069: that is
    ``test_dashboard_backoff_browser.py``'s, and the first test's here)."""
    require_browser()
    stopping: Answer = (503, _refusal("Service unavailable: the server is stopping"), {})
    busy: Answer = (
        429,
        "<p role=alert>Too many requests; try again in 7 s.</p>",
        {"Retry-After": "7"},
    )
    answers = [stopping, busy] + [stopping] * 5 + [(200, STREAM, {}), stopping]
    stopping_text = (
        "Live updates paused: Service unavailable: the server is stopping; reconnecting\u2026"
    )
    busy_text = "Live updates paused: Too many requests; try again in 7 s; reconnecting\u2026"
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            reader = await sign_in(browser, server, ANN)
            await reader.add_init_script("Math.random = () => 0;")
            await _paused_clock(reader)
            await _refusing(reader, answers)
            await reader.goto(f"{server.base}/")
            waits = []
            for attempts in range(1, 8):
                text = await _status(reader, "retrying", attempts)
                assert text == (busy_text if attempts == 2 else stopping_text)
                waits.append(await _wait_ms(reader))
                if attempts == 2:  # Retry-After, longer than 1 s: not asked before
                    await reader.clock.run_for(waits[-1] - 1)
                    await _round_trip(reader)
                    assert len(answers) == 7
                    await reader.clock.run_for(1)
                else:
                    await reader.clock.run_for(waits[-1])
            assert waits == [500, 7_000, 2_000, 4_000, 8_000, 15_000, 15_000]

            # Connected, and closed at once: the waits go on (before, they started over).
            assert await _status(reader, "retrying", 8) == (
                "Live updates paused: the connection closed; reconnecting\u2026"
            )
            waits = [await _wait_ms(reader)]
            await reader.clock.run_for(waits[-1])
            assert await _status(reader, "retrying", 9) == stopping_text
            waits.append(await _wait_ms(reader))
            assert waits == [15_000, 15_000]
            assert answers == []


async def test_a_hung_redraw_does_not_keep_a_page_from_connecting_again(
    tmp_path: Path,
) -> None:
    """The stream says "change" and closes; the page's redraw never gets an answer. A
    page waits for its redraw before it connects again (so it names what it shows): the
    redraw must end (10 s), and the page connect again."""
    require_browser()
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            reader = await sign_in(browser, server, ANN)
            await _paused_clock(reader)
            hung = anyio.Event()
            asked: list[str] = []

            async def changed_once(route: "Route") -> None:
                asked.append(route.request.url)
                if len(asked) == 1:
                    body = STREAM + "event: change\ndata: {}\n\n"
                    await route.fulfill(body=body, content_type="text/event-stream")
                else:
                    await route.continue_()

            async def hanging(route: "Route") -> None:
                hung.set()  # never answered: the page ends the fetch, or nothing does

            await reader.route(_events, changed_once)
            await reader.route(_fragment, hanging)
            await reader.goto(f"{server.base}/")
            with anyio.fail_after(WAIT_MS / 1000):
                await hung.wait()
            await _status(reader, "retrying", 1)
            await reader.clock.run_for(await _wait_ms(reader))
            assert len(asked) == 1  # the redraw is still under way
            await reader.clock.run_for(10_000)
            assert await _status(reader, "live") == ""
            assert len(asked) == 2


@asynccontextmanager
async def _one_stream_that_ends(reader: "Page") -> AsyncIterator[list[int]]:
    """*reader*'s events requests answered by a stream that ends with ``end`` (what a
    revoked or expired grant's stream sends), held until the block ends; yields the
    number of streams asked for (one item)."""
    released, streams = anyio.Event(), [0]

    async def ended(route: "Route") -> None:
        streams[0] += 1
        await released.wait()
        body = STREAM + "event: end\ndata: {}\n\n"
        await route.fulfill(body=body, content_type="text/event-stream")

    await reader.route(_events, ended)
    try:
        yield streams
    finally:
        released.set()


async def test_a_page_whose_sign_in_ended_says_its_updates_stopped(tmp_path: Path) -> None:
    """A stream ends with ``end`` and the redraw after it is refused: the page says so
    and connects no more. Before, a refused redraw was dropped unsaid, and the page
    stayed as it was."""
    require_browser()
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            reader = await sign_in(browser, server, ANN)
            async with _one_stream_that_ends(reader) as streams:
                await reader.goto(f"{server.base}/")
                # as if its token were revoked
                await reader.context.add_cookies(
                    [{"name": COOKIE, "value": "tl_not_a_token", "url": server.base}]
                )
            text = await _status(reader, "stopped")
            assert text == (
                "Live updates stopped: Unauthorized: the bearer token is not valid. "
                "Reload to try again."
            )
            await _round_trip(reader)
            assert streams == [1]


async def test_a_page_signed_out_in_another_tab_says_its_updates_stopped(tmp_path: Path) -> None:
    """Signed out elsewhere (the cookie gone), the redraw after the stream's end is sent
    to the sign-in page: the page says it stopped, and does not draw the sign-in page in
    its live region (a review found it did, and said it was still live)."""
    require_browser()
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            reader = await sign_in(browser, server, ANN)
            async with _one_stream_that_ends(reader) as streams:
                await reader.goto(f"{server.base}/")
                await reader.context.clear_cookies()  # as "Sign out" in another tab does
            text = await _status(reader, "stopped")
            assert text == "Live updates stopped: signed out. Reload to try again."
            assert await reader.locator("#live form").count() == 0  # no sign-in form in it
            await _round_trip(reader)
            assert streams == [1]
