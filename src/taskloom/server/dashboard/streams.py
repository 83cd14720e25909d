"""How many live streams each principal may hold open at once (ADR 0030)."""

from collections import Counter
from collections.abc import Callable
from typing import Final

MAX_STREAMS_PER_PRINCIPAL: Final = 20
"""Open ``/ui`` event streams one principal may hold (browser tabs, pages)."""


class StreamSlots:
    """Counts the open streams of each principal, up to a cap."""

    def __init__(self, limit: int = MAX_STREAMS_PER_PRINCIPAL) -> None:
        self._limit = limit
        self._open: Counter[str] = Counter()

    @property
    def limit(self) -> int:
        """The most streams a principal may hold open."""
        return self._limit

    def take(self, principal: str) -> Callable[[], None] | None:
        """A slot for one more stream of *principal* (call it to give the slot back,
        at most once), or ``None`` when it holds the limit already."""
        if self._open[principal] >= self._limit:
            return None
        self._open[principal] += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self._open[principal] -= 1
                if not self._open[principal]:
                    del self._open[principal]

        return give_back
