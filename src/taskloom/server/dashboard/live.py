"""Server-Sent Events: a ``change`` event whenever what a page shows has changed.

A stream wakes on the change hub (the engine's change feed and node events), and, when
the dashboard has a re-check period, at that period too (changes made by processes whose
events do not reach this one); it then reads what its page shows and sends ``change``
only if that differs. A comment at least every ``KEEPALIVE_S`` finds clients that left.
A task page's stream ends (``end``) once its task is terminal and shown so.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import anyio
from starlette.responses import StreamingResponse

from taskloom.server.dashboard.hub import ChangeHub

KEEPALIVE_S: Final = 15.0
Fingerprint = Callable[[], Awaitable[tuple[tuple[object, ...], bool]]]
"""What the page shows now (compared between wakes), and whether it can change no more."""


def event_stream(
    hub: ChangeHub, task_id: str | None, read: Fingerprint, recheck_s: float | None
) -> StreamingResponse:
    """The response streaming ``change`` events of the page *read* fingerprints, woken
    by changes of *task_id* (``None``: of any task)."""
    period = min(recheck_s, KEEPALIVE_S) if recheck_s else KEEPALIVE_S
    return StreamingResponse(
        _events(hub, task_id, read, period),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _events(
    hub: ChangeHub, task_id: str | None, read: Fingerprint, period: float
) -> AsyncIterator[str]:
    with hub.listen(task_id) as listener:  # before reading: no change is missed
        shown, ended = await read()
        yield "retry: 2000\n\n"
        while not ended:
            with anyio.move_on_after(period):
                await listener.wait()
            current, ended = await read()
            if current != shown:
                shown = current
                yield "event: change\ndata: {}\n\n"
            else:
                yield ": keepalive\n\n"
        yield "event: end\ndata: {}\n\n"
