"""The tasks this process last read or wrote with a large body, by that body (ADR 0051).

A run's task body holds its shape (ADR 0042): 92 KB for a 1,000-node run, some
milliseconds to parse, read again by every write of the task (each progress report, the
result). A body is looked up by its exact text (a hash and one comparison), so a hit is
the task that text holds, whoever wrote it since: no version to trust, nothing to evict
but the oldest. Tasks are immutable, so one object may serve every reader. A parsed shape
takes about 11 times its text in memory (1 MiB for 1,000 nodes; the versions of one run
share it), so what is kept is bounded by its text as well as by count.
"""

import threading
from collections import OrderedDict
from typing import Final

from taskloom.engine.models import Task

LARGE: Final = 8192
"""Bodies shorter than this (in characters) parse faster than they are worth keeping."""
KEPT: Final = 32
"""How many large bodies are kept at most (the newest)."""
KEPT_CHARACTERS: Final = 2_000_000
"""How much body text is kept at most (a larger body is not kept at all)."""


class Kept:
    """Tasks by their large body texts, the newest kept within *count* and *characters*."""

    def __init__(self, count: int = KEPT, characters: int = KEPT_CHARACTERS) -> None:
        self._count = count
        self._limit = characters
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._characters = 0
        self._lock = threading.Lock()  # the writer's, the reader's and the loop's threads

    def known(self, body: str) -> Task | None:
        """The task *body* holds, if it was read or written here lately."""
        if len(body) < LARGE:
            return None
        with self._lock:
            return self._tasks.get(body)

    def keep(self, body: str, task: Task) -> None:
        """Remember that *body* holds *task* (the text it parses to, or was dumped from)."""
        if not LARGE <= len(body) <= self._limit:
            return
        with self._lock:
            if body not in self._tasks:
                self._characters += len(body)
            self._tasks[body] = task
            self._tasks.move_to_end(body)
            while len(self._tasks) > self._count or self._characters > self._limit:
                dropped, _ = self._tasks.popitem(last=False)
                self._characters -= len(dropped)

    def __len__(self) -> int:
        return len(self._tasks)


KEPT_BODIES: Final = Kept()
"""This process's."""
known = KEPT_BODIES.known
keep = KEPT_BODIES.keep
