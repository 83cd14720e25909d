"""Server-Sent Events: a ``change`` event whenever what a page shows has changed.

A stream wakes on the change hub (the engine's change feed and node events), and, when
the dashboard has a re-check period, at that period too (changes made by processes
whose events do not reach this one); it then reads what its page shows and sends
``change`` only if that differs. A wake alone sends nothing: the ``: keepalive`` comment
that finds clients that left goes on a timer (every ``KEEPALIVE_S``), so a stream's
traffic tells nothing of changes it does not show. A task page's stream ends (``end``)
once its task is terminal and shown so.

A stream is held by its viewer's grant (``http.grant_watch``, ADR 0037): once the token
is revoked or expires, or the server stops, nothing more is sent but a last ``end``
event, and the stream is closed; the page then reloads, and asks to sign in again.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from taskloom.engine.manager import ANY_OWNER, OwnerScope
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.http.grant_watch import GrantWatch, LiveGrant
from taskloom.server.http.guarded import serve_guarded

KEEPALIVE_S: Final = 15.0
END: Final = "event: end\ndata: {}\n\n"
Fingerprint = Callable[[], Awaitable[tuple[tuple[object, ...], bool]]]
"""What the page shows now (compared between wakes), and whether it can change no more."""


class _Held(StreamingResponse):
    """A stream that gives its slot back once it ends, however it ends."""

    def __init__(
        self,
        body: AsyncIterator[str],
        release: Callable[[], None],
        watch: GrantWatch | None,
        live: LiveGrant | None,
    ) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._release = release
        self._watch = watch if watch is not None else GrantWatch()
        self._live = live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await serve_guarded(
                self._watch,
                self._live,
                super().__call__,
                scope,
                receive,
                send,
                via="dashboard",
                closing=END.encode(),
            )
        finally:
            self._release()


def event_stream(
    hub: ChangeHub,
    task_id: str | None,
    read: Fingerprint,
    recheck_s: float | None,
    *,
    owner: OwnerScope = ANY_OWNER,
    slot: Callable[[], None] = lambda: None,
    watch: GrantWatch | None = None,
    live: LiveGrant | None = None,
) -> StreamingResponse:
    """The response streaming ``change`` events of the page *read* fingerprints, woken
    by changes of *task_id* (``None``: of any task *owner* sees); *slot* is called once
    the stream has ended (``StreamSlots.take`` gave it); *watch* ends it once *live*,
    the viewer's grant, ends, or the server stops."""
    return _Held(_events(hub, task_id, owner, read, recheck_s), slot, watch, live)


async def _events(
    hub: ChangeHub,
    task_id: str | None,
    owner: OwnerScope,
    read: Fingerprint,
    recheck_s: float | None,
) -> AsyncIterator[str]:
    with hub.listen(task_id, owner) as listener:  # before reading: no change is missed
        shown, ended = await read()
        yield "retry: 2000\n\n"
        keepalive_at = anyio.current_time() + KEEPALIVE_S
        while not ended:
            now = anyio.current_time()
            wait_s = keepalive_at - now
            if recheck_s:
                wait_s = min(wait_s, recheck_s)
            with anyio.move_on_after(max(wait_s, 0)) as timer:
                await listener.wait()
            current, ended = await read()
            if current != shown:
                shown = current
                yield "event: change\ndata: {}\n\n"
                keepalive_at = anyio.current_time() + KEEPALIVE_S
            elif timer.cancelled_caught and anyio.current_time() >= keepalive_at:
                yield ": keepalive\n\n"
                keepalive_at = anyio.current_time() + KEEPALIVE_S
        yield END
