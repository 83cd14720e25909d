"""The guard of the request a handler serves, as the MCP layer reads it (ADR 0037).

Taskloom's HTTP transport holds each request it serves under a guard of its grant
(:meth:`taskloom.server.http.grant_watch.GrantWatch.guard` sets it here); the
middleware (:func:`taskloom.server.middleware.end_with_request`) reads it. Over stdio
or in an embedded server there is none, and the HTTP package is never imported: this
module is the part of the watch that every transport loads (ADR 0071).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from taskloom.server.http.grant_watch import Guard

current_guard: "ContextVar[Guard | None]" = ContextVar("taskloom_request_guard", default=None)
"""The guard of the request being served (``None``: no HTTP request of taskloom's)."""


def guarded() -> bool:
    """Whether the current request has a guard (every request over taskloom's HTTP, the
    local user's too: the server's stop ends it); outside one (stdio, an embedded
    server), :func:`with_request` would add a cancel scope nothing ever cancels."""
    return current_guard.get() is not None


@contextmanager
def with_request() -> Iterator[anyio.CancelScope]:
    """Run the body in a cancel scope cancelled when the current request's guard ends
    (a request handler that runs in another task, with the request's context, as a
    2025-11-25 session's do); outside any guarded request, one that is never cancelled."""
    held = current_guard.get()
    with anyio.CancelScope() as scope:
        if held is None:
            yield scope
            return
        held.linked.add(scope)
        if held.ending is not None:
            scope.cancel()
        try:
            yield scope
        finally:
            held.linked.discard(scope)
