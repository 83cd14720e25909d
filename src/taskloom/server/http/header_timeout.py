"""A header-read timeout for uvicorn, which has none (0.54: only a keep-alive timeout,
armed after a response, and disarmed by the first byte of the next request).

A connection that has not sent a complete request head (request line and headers)
within the timeout of its first byte, or of being accepted, is closed: half a request
line and a stall (slowloris) no longer holds a connection and its memory for ever. The
clock starts once per request: a client dribbling one byte at a time gains nothing.
A body, once the head is in, is the application's to bound (``BodyLimit``), and a
long-lived response stream (SSE) is not affected.
"""

import asyncio
import logging
from typing import ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)


class _HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is late."""

    header_timeout_s: ClassVar[float]
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._await_head()  # a request has begun (or none yet): its head must come
        else:
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._stop_waiting()  # between requests, uvicorn's keep-alive timeout holds

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_late)

    def _stop_waiting(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            prefix = f"{self.client[0]}:{self.client[1]}: " if self.client else ""
            logger.info(
                "%sno complete request head in %g s: closing", prefix, self.header_timeout_s
            )
            self.transport.close()


def with_header_timeout(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a header-read timeout of *timeout_s* seconds (pass
    it as ``uvicorn.Config(http=...)``)."""

    class HeaderTimeoutProtocol(_HeaderTimeoutProtocol):
        header_timeout_s = timeout_s

    return HeaderTimeoutProtocol
