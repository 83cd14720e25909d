"""What every stream wrapper of the server shares: leaving ``async with`` closes it.

The SDK's transports enter the streams they are handed (``async with write_stream``), as
anyio's object streams allow; a wrapper (``push.Outbox``, ``http.inflight``'s, the
sessions' ``_Nowhere``) says how it closes and inherits the rest.
"""

from abc import ABC, abstractmethod
from typing import Self


class ClosesOnExit(ABC):
    """An async context manager that closes the stream (:meth:`aclose`) when left."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the stream (each wrapper says how)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
