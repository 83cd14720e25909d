"""A live page's backoff against streams that answer and then fail (ADR 0069), in a real
Chromium: the page runs the dashboard's own ``static/app.js``, served with a page that
has a live region by a small HTTP server of this test's, which answers each events
request as the test says: 200 and closed at once (a handler that returns at once, a
proxy with a short read timeout, a load balancer draining), 200 and the connection cut
mid-body (a handler that crashes), or 200 and held open, written to by the test.

A stream that answers and fails at once is a failure like a refusal: the waits go on
doubling up to 30 s. Before, any answer with an OK status started them over, so such a
server had every open page reconnect every 0.5 to 1 s for ever. A stream starts them over
once it has proved itself: something read from it 10 s or more after it answered. The
page's clock is Playwright's, paused (as in ``test_dashboard_reconnect_browser.py``): the
waits and the 10 s are read from the page and run through, never slept."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

import taskloom.server.dashboard
from tests.e2e.browser import require_browser
from tests.e2e.test_dashboard_browser import WAIT_MS, chromium
from tests.e2e.test_dashboard_reconnect_browser import (
    PROVEN_MS,
    _attempts,
    _paused_clock,
    _status,
    _wait_ms,
)

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = pytest.mark.slow

APP_JS: Final = Path(taskloom.server.dashboard.__file__).parent / "static" / "app.js"
PAGE: Final = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>A live page</title>'
    '<script src="/app.js" defer></script></head><body><main>'
    '<div id="live" data-events="/events">drawn 0</div></main></body></html>'
)
Stream = Literal["closed", "cut", "held"]
"""How an events request is answered: 200, then the connection closed at once after the
first line (``retry``), cut before the chunked body ends, or held open for the test."""
CLOSED_TEXT: Final = "Live updates paused: the connection closed; reconnecting\u2026"
CUT_TEXT: Final = "Live updates paused: no answer from the server; reconnecting\u2026"


@dataclass
class _Held:
    """An events stream held open: the test writes to it, then closes it."""

    client: SocketStream
    closed: anyio.Event


@dataclass
class Site:
    """The small server: its address, how it answers the next events requests (then
    "closed"), what it has answered, and the streams it holds open."""

    base: str
    streams: list[Stream]
    held: MemoryObjectReceiveStream[_Held]
    answered: list[Stream] = field(default_factory=list)
    drawn: int = 0

    async def next_held(self) -> _Held:
        """The next events stream held open (bounded)."""
        with anyio.fail_after(WAIT_MS / 1000):
            return await self.held.receive()


def _head(status: str, kind: str, *lines: str) -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Type: {kind}", "Cache-Control: no-store"]
    return ("\r\n".join([*head, *lines, "Connection: close", "", ""])).encode()


async def _answer(site: Site, client: SocketStream, held: MemoryObjectSendStream[_Held]) -> None:
    """One request on *client*, answered, then the connection closed (no keep-alive)."""
    request = await BufferedByteReceiveStream(client).receive_until(b"\r\n\r\n", 65_536)
    target = request.split(b"\r\n", 1)[0].decode().split(" ")[1]
    if target == "/app.js":
        body = APP_JS.read_bytes()
        await client.send(_head("200 OK", "text/javascript", f"Content-Length: {len(body)}"))
        await client.send(body)
    elif target == "/events":
        stream = site.streams.pop(0) if site.streams else "closed"
        site.answered.append(stream)
        if stream == "cut":  # a chunk of the body, then no last chunk: the handler crashed
            await client.send(_head("200 OK", "text/event-stream", "Transfer-Encoding: chunked"))
            await client.send(b"d\r\nretry: 2000\n\n\r\n")
            return
        await client.send(_head("200 OK", "text/event-stream") + b"retry: 2000\n\n")
        if stream == "held":  # the test writes to it, and closes it (or the site ends)
            closed = anyio.Event()
            await held.send(_Held(client, closed))
            await closed.wait()
    elif "fragment=1" in target:
        site.drawn += 1
        body = f"drawn {site.drawn}".encode()
        await client.send(_head("200 OK", "text/html", f"Content-Length: {len(body)}"))
        await client.send(body)
    elif target == "/":
        await client.send(_head("200 OK", "text/html; charset=utf-8"))
        await client.send(PAGE.encode())
    else:
        await client.send(_head("404 Not Found", "text/plain", "Content-Length: 0"))


@asynccontextmanager
async def _site(streams: list[Stream]) -> AsyncIterator[Site]:
    """The small server on a free port of 127.0.0.1, answering events requests as
    *streams* says, then "closed"; stopped (its connections closed) on the way out."""
    send, receive = anyio.create_memory_object_stream[_Held](8)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    site = Site(f"http://127.0.0.1:{port}", list(streams), receive)

    async def serve(client: SocketStream) -> None:
        # the page went, or a connection it opened ahead was never used
        gone = (anyio.BrokenResourceError, anyio.EndOfStream, anyio.IncompleteRead)
        async with client:
            with suppress(*gone):
                await _answer(site, client, send)

    async with listener, send, receive, anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        try:
            yield site
        finally:
            group.cancel_scope.cancel()


async def _page(browser: "Browser", site: Site) -> "Page":
    """*site*'s live page in a new context, ``Math.random`` 0 (each wait is half the
    doubling one: 0.5 s, 1 s, 2 s ... 15 s) and its clock paused."""
    page = await (await browser.new_context()).new_page()
    page.set_default_timeout(WAIT_MS)
    await page.add_init_script("Math.random = () => 0;")
    await _paused_clock(page)
    await page.goto(f"{site.base}/")
    return page


async def test_streams_that_answer_and_fail_at_once_do_not_start_the_waits_over() -> None:
    """Eight streams in a row answer 200 and end at once, closed or cut: the waits double
    as after eight refusals (0.5 s to 15 s, the 30 s ceiling's lower half), and the line
    counts eight failures in a row. Before, each answer started the waits over: 0.5 s
    each, for ever, and the count never passed 1."""
    require_browser()
    closed: list[Stream] = ["closed"]
    cut: list[Stream] = ["cut"]
    streams = closed * 4 + cut * 4
    with anyio.fail_after(60):
        async with _site(streams) as site, chromium() as browser:
            page = await _page(browser, site)
            waits = []
            for attempts, stream in enumerate(streams, start=1):
                text = await _status(page, "retrying", attempts)
                assert text == (CLOSED_TEXT if stream == "closed" else CUT_TEXT)
                waits.append(await _wait_ms(page))
                await page.clock.run_for(waits[-1])
            assert waits == [500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]
            assert site.answered[:8] == streams  # each one answered 200


async def test_the_waits_start_over_once_a_stream_has_proved_itself() -> None:
    """Three streams close at once; the fourth is held open. Open, the page is live (the
    line hidden) but still counts three failures: an event read at once, or 9.999 s
    after the answer, proves nothing. A keepalive read 10 s after the answer proves the
    stream: the count is 0, and once the stream closes the waits start over at 0.5 s."""
    require_browser()
    first: list[Stream] = ["closed", "closed", "closed", "held"]
    with anyio.fail_after(60):
        async with _site(first) as site, chromium() as browser:
            page = await _page(browser, site)
            for attempts in range(1, 4):
                assert await _status(page, "retrying", attempts) == CLOSED_TEXT
                await page.clock.run_for(await _wait_ms(page))
            stream = await site.next_held()
            assert await _status(page, "live", 3) == ""

            change = b"event: change\ndata: {}\n\n"
            await stream.client.send(change)  # the page reads it: it draws its region anew
            await page.locator("#live", has_text="drawn 1").wait_for()
            assert await _attempts(page) == "3"
            await page.clock.run_for(PROVEN_MS - 1)
            await stream.client.send(change)
            await page.locator("#live", has_text="drawn 2").wait_for()
            assert await _attempts(page) == "3"

            await page.clock.run_for(1)
            await stream.client.send(b": keepalive\n\n")
            assert await _status(page, "live", 0) == ""
            stream.closed.set()
            assert await _status(page, "retrying", 1) == CLOSED_TEXT
            assert await _wait_ms(page) == 500
            await page.clock.run_for(500)
            assert await _status(page, "retrying", 2) == CLOSED_TEXT
            assert await _wait_ms(page) == 1_000
            assert site.answered == ["closed", "closed", "closed", "held", "closed"]
