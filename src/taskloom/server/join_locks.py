"""One lock per plain call's join key, so that two identical calls at once make one task
while unrelated calls never wait for each other (ADR 0040).

A call holds the lock of its key while it looks for the task it would join and creates
it: during a store outage that is as long as the store wait, and only a call of the same
key waits behind it. A lock nobody holds or waits for is forgotten, so the table stays as
small as the calls in flight. (anyio has no keyed lock, and one dict is all it takes.)
"""

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio


@dataclass
class _Held:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0
    """Calls holding or waiting for the lock."""


class JoinLocks:
    """Locks by key, created on first use and dropped when unused."""

    def __init__(self) -> None:
        self._held: dict[Hashable, _Held] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for."""
        return len(self._held)

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        """Hold *key*'s lock (waiting for the call that holds it, if any)."""
        held = self._held.setdefault(key, _Held())
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]
