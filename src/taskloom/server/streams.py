"""What every stream wrapper of the server shares: leaving ``async with`` closes it.

The SDK's transports enter the streams they are handed (``async with write_stream``), as
anyio's object streams allow; a wrapper (``push.Outbox``, ``http.inflight``'s, the
sessions' ``_Nowhere``) says how it closes and inherits the rest.
"""

from types import TracebackType
from typing import Self


class ClosesOnExit:
    """An async context manager that closes the stream (:meth:`aclose`) when left."""

    async def aclose(self) -> None:
        """Close the stream (nothing to close, unless a subclass says otherwise)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
