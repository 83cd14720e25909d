"""The tasks this process last read or wrote with a large body, by that body (ADR 0051).

A run's task body holds its shape (ADR 0042): 92 KB for a 1,000-node run, some
milliseconds to parse, read again by every write of the task (each progress report, the
result). A body is looked up by its exact text (a hash and one comparison), so a hit is
the task that text holds, whoever wrote it since: no version to trust, nothing to evict
but the oldest. Tasks are immutable, so one object may serve every reader.
"""

import threading
from collections import OrderedDict
from typing import Final

from taskloom.engine.models import Task

LARGE: Final = 8192
"""Bodies shorter than this (in characters) parse faster than they are worth keeping."""
KEPT: Final = 32
"""How many large bodies are kept (the newest)."""

_kept: OrderedDict[str, Task] = OrderedDict()
_lock = threading.Lock()  # the writer's, the reader's and the loop's threads share it


def known(body: str) -> Task | None:
    """The task *body* holds, if it was read or written here lately."""
    if len(body) < LARGE:
        return None
    with _lock:
        return _kept.get(body)


def keep(body: str, task: Task) -> None:
    """Remember that *body* holds *task* (the text it parses to, or was dumped from)."""
    if len(body) < LARGE:
        return
    with _lock:
        _kept[body] = task
        _kept.move_to_end(body)
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
