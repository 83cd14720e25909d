"""The system clock behind the engine's ``Clock`` port."""

from datetime import UTC, datetime

import anyio


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """Wait *seconds* of wall-clock time."""
        await anyio.sleep(seconds)
