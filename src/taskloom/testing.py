"""Fakes for testing code that uses taskloom: an in-memory store and a clock you move."""

from datetime import UTC, datetime, timedelta

import anyio

from taskloom.persistence.memory import InMemoryTaskStore

__all__ = ("FakeClock", "InMemoryTaskStore")


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        self.slept: list[float] = []
        """Every sleep asked of this clock, in order (e.g. retry backoffs)."""

    def now(self) -> datetime:
        """The fake current time."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Move time forward by *seconds* at once (and let other tasks run)."""
        self.advance(max(seconds, 0.0))
        self.slept.append(seconds)
        await anyio.lowlevel.checkpoint()

    def advance(self, seconds: float) -> None:
        """Move time forward by *seconds*."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += timedelta(seconds=seconds)
