"""Server-Sent Events: a ``change`` event whenever what a page shows has changed.

A stream wakes on the change hub (the engine's change feed and node events), and, when
the dashboard has a re-check period, at that period too (changes made by processes
whose events do not reach this one); it then reads what its page shows and sends
``change`` only if that differs. A wake alone sends nothing: the ``: keepalive`` comment
that finds clients that left goes on a timer (every ``KEEPALIVE_S``), so a stream's
traffic tells nothing of changes it does not show. A task page's stream ends (``end``)
once its task is terminal and shown so.

A page names what it shows (``?seen=``, the digest of :mod:`.seen`): its stream's first
read is compared to that, not to itself, so a change made after the page was rendered
and before the stream started (or while a dropped stream reconnected) is sent at once.

A stream is held by its viewer's grant (``http.grant_watch``, ADR 0037): once the token
is revoked or expires, nothing more is sent but a last ``end`` event, and the stream is
closed; the page then reloads its live region, and says it is live no more. When the
server stops, the last event is ``stopping``: the page keeps what it shows and connects
again (waits doubling from 1 s to 30 s, jittered; ``static/app.js``) until a server
answers, naming what it shows, so a change made while no server ran is shown once one
does. ``retry`` is for other clients of the stream: the page's script keeps its own.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, NamedTuple

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from taskloom.engine.manager import ANY_OWNER, OwnerScope
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.http.grant_watch import GrantWatch, LiveGrant
from taskloom.server.http.guarded import serve_guarded

KEEPALIVE_S: Final = 15.0
RETRY: Final = "retry: 2000\n\n"
CHANGE: Final = "event: change\ndata: {}\n\n"
END: Final = "event: end\ndata: {}\n\n"
STOPPING: Final = "event: stopping\ndata: {}\n\n"
"""The last event of a stream whose server stops: the page connects again."""


class Reading(NamedTuple):
    """What a page shows now."""

    compared: tuple[object, ...]
    """Compared between wakes: a change is sent when it differs."""
    seen: str
    """The digest a page rendered from this read carries (``?seen=``)."""
    ended: bool
    """It can change no more."""


Fingerprint = Callable[[], Awaitable[Reading]]
"""Reads what the page shows now."""


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
                closing_on_shutdown=STOPPING.encode(),
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
    seen: str | None = None,
) -> StreamingResponse:
    """The response streaming ``change`` events of the page *read* fingerprints, woken
    by changes of *task_id* (``None``: of any task *owner* sees); *seen* is the digest
    of what the page shows (``None``: the first read is taken as shown); *slot* is
    called once the stream has ended (``StreamSlots.take`` gave it); *watch* ends it
    once *live*, the viewer's grant, ends, or the server stops."""
    return _Held(_events(hub, task_id, owner, read, recheck_s, seen), slot, watch, live)


async def _events(
    hub: ChangeHub,
    task_id: str | None,
    owner: OwnerScope,
    read: Fingerprint,
    recheck_s: float | None,
    seen: str | None,
) -> AsyncIterator[str]:
    with hub.listen(task_id, owner) as listener:  # before reading: no change is missed
        shown, first_seen, ended = await read()
        yield RETRY
        if seen is not None and first_seen != seen and not ended:  # an end refreshes too
            yield CHANGE
        keepalive_at = anyio.current_time() + KEEPALIVE_S
        while not ended:
            now = anyio.current_time()
            wait_s = keepalive_at - now
            if recheck_s:
                wait_s = min(wait_s, recheck_s)
            with anyio.move_on_after(max(wait_s, 0)) as timer:
                await listener.wait()
            current, _, ended = await read()
            if current != shown:
                shown = current
                yield CHANGE
                keepalive_at = anyio.current_time() + KEEPALIVE_S
            elif timer.cancelled_caught and anyio.current_time() >= keepalive_at:
                yield ": keepalive\n\n"
                keepalive_at = anyio.current_time() + KEEPALIVE_S
        yield END
