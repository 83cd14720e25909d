"""Small shared test utilities."""

from collections.abc import Awaitable, Callable

import anyio


async def eventually(
    condition: Callable[[], Awaitable[bool]], *, within_s: float = 10.0, every_s: float = 0.01
) -> None:
    """Wait until *condition* holds, re-checking every *every_s* seconds.

    Only for state that publishes no event (rows in a store written by another task or
    process); the wait is bounded by *within_s*.
    """
    with anyio.fail_after(within_s):
        while not await condition():  # noqa: ASYNC110  # polls a store, which has no event
            await anyio.sleep(every_s)
