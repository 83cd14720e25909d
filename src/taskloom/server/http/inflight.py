"""The request ids a 2025-11-25 session is serving, so a reused one is refused.

``mcp==2.3.0``'s session transport keys each POST's response stream by ``str(id)``,
and a second request with the id of one still being served replaces the first one's
stream: the first answer lands on the second request's stream, and the second request's
own answer finds none (HTTP 200 with an empty body). JSON-RPC 2.0 asks a client for
ids unique among its requests in flight, so :class:`InFlight` holds an id from the POST
that carries it until the server has answered it (or settled it unanswered: a
cancelled request), and a request reusing it meanwhile is refused ``-32600`` naming the
id, before the transport sees it. The server's streams are wrapped to see both ends.
"""

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Self

from mcp.shared._stream_protocols import ReadStream, WriteStream  # the SDK's protocols
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse, RequestId

from taskloom.server.streams import ClosesOnExit


class InFlight:
    """The ids of one session's requests that are not answered yet."""

    def __init__(self) -> None:
        self._ids: dict[str, bool] = {}
        """Each id claimed, and whether the server has received its request."""

    def claim(self, request_id: RequestId) -> bool:
        """Hold *request_id* for a request about to be served (``False``: it is held)."""
        key = str(request_id)  # as the transport keys its streams: 1 and "1" are one
        if key in self._ids:
            return False
        self._ids[key] = False
        return True

    def served(self, request_id: RequestId) -> None:
        """The POST of *request_id* is over: let the id go if the server never got it
        (the transport refused the request itself)."""
        if self._ids.get(str(request_id)) is False:
            del self._ids[str(request_id)]

    def reads(self, stream: ReadStream[SessionMessage | Exception]) -> "_Reads":
        """*stream* (what the server receives), marking each request received."""
        return _Reads(stream, self)

    def writes(self, stream: WriteStream[SessionMessage]) -> "_Writes":
        """*stream* (what the server sends), letting each answered id go."""
        return _Writes(stream, self)

    def _received(self, message: SessionMessage) -> SessionMessage:
        request = message.message
        if not isinstance(request, JSONRPCRequest):
            return message
        key = str(request.id)
        if key in self._ids:
            self._ids[key] = True
        metadata = message.metadata
        if isinstance(metadata, ServerMessageMetadata):
            hook = metadata.on_request_unanswered
            metadata = dataclasses.replace(
                metadata, on_request_unanswered=self._unanswered(key, hook)
            )
            return SessionMessage(request, metadata=metadata)
        return message

    def _unanswered(
        self, key: str, hook: Callable[[], Awaitable[None]] | None
    ) -> Callable[[], Awaitable[None]]:
        async def settled() -> None:
            self._ids.pop(key, None)
            if hook is not None:
                await hook()

        return settled

    def _answered(self, message: SessionMessage) -> None:
        answer = message.message
        if isinstance(answer, JSONRPCResponse | JSONRPCError) and answer.id is not None:
            self._ids.pop(str(answer.id), None)


class _Reads(ClosesOnExit):
    """A read stream that tells its :class:`InFlight` of each request received."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], ids: InFlight) -> None:
        self._inner = inner
        self._ids = ids

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item (the SDK runs handlers in it)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        return self._ids._received(item) if isinstance(item, SessionMessage) else item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        item = await self._inner.__anext__()
        return self._ids._received(item) if isinstance(item, SessionMessage) else item


class _Writes(ClosesOnExit):
    """A write stream that tells its :class:`InFlight` of each answer sent."""

    def __init__(self, inner: WriteStream[SessionMessage], ids: InFlight) -> None:
        self._inner = inner
        self._ids = ids

    async def send(self, item: SessionMessage, /) -> None:
        self._ids._answered(item)  # first: a client that has the answer may reuse the id
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()
