"""The connection's outgoing stream, watched: who has been answered already.

A task's notifications must follow the ``CreateTaskResult`` that announced it, but the
SDK writes a response after the handler has returned, with no hook. Wrapping the
server's write stream lets a task's follower hold its notifications until the response
with its request id has been handed to the transport (whose writes are ordered).
"""

from collections.abc import Callable
from types import TracebackType
from typing import Self

from mcp.shared._stream_protocols import WriteStream  # the SDK's transport protocol
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse, RequestId


class Outbox:
    """A write stream that signals when the response to a given request has gone out."""

    def __init__(self, inner: WriteStream[SessionMessage]) -> None:
        self._inner = inner
        self._awaited: dict[RequestId, list[Callable[[], None]]] = {}

    def on_response(self, request_id: RequestId, callback: Callable[[], None]) -> None:
        """Call *callback* once the response (result or error) to *request_id* is sent.

        Call it before the response can be written, i.e. from the request's handler.
        """
        self._awaited.setdefault(request_id, []).append(callback)

    async def send(self, item: SessionMessage, /) -> None:
        """Send *item*; if it answers an awaited request, signal that."""
        await self._inner.send(item)
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            for callback in self._awaited.pop(message.id, ()):
                callback()

    async def aclose(self) -> None:
        """Close the underlying stream."""
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
