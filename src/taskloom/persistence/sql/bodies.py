"""The run shapes of the large task bodies this process last read or wrote (ADR 0051).

A run's task body holds its shape (ADR 0042): 92 KB for a 1,000-node run, some
milliseconds to parse, read again by every write of the task (each progress report, the
result). A body is looked up by its exact text (its length and ends, then one comparison
of the whole), so a hit is what that text holds, whoever wrote it since: no version to
trust; a key holds up to :data:`_SAME_KEY` bodies (the comparison picks the one), and
the oldest go first. What is kept is the parsed shape (immutable all
through: frozen models and tuples, so every reader may share it) and the text of the rest
of the task, which each hit parses again: no reader gets a list or dict another reader
could change, and each gets what the text holds (a value its JSON cannot hold as it was,
a non-finite float written ``null``, reads back as the text has it). A parsed shape takes
about 11 times its text in memory (1 MiB for 1,000 nodes; the versions of one run share
it), so what is kept is bounded by its text as well as by count.

The other way, a large shape's text is dumped once per shape object (ADR 0060): a task's
body is its text without the shape, the shape's text spliced in where
``model_dump_json`` puts it (the same text, byte for byte), since every write of a
1,000-node run's task would otherwise serialize its 1,000 nodes again (5 million
instructions a write, four writes a run).
"""

import threading
from collections import OrderedDict
from typing import Final

from taskloom.engine.models import Task
from taskloom.engine.shape import RunShape

LARGE: Final = 8192
"""Bodies shorter than this (in characters) parse faster than they are worth keeping."""
KEPT: Final = 32
"""How many large bodies are kept at most (the newest)."""
KEPT_CHARACTERS: Final = 2_000_000
"""How much text is kept at most, the bodies' and their rests' (a larger body is not
kept at all)."""

SPLICED_NODES: Final = LARGE // 61
"""A shape of at least this many nodes is dumped once and spliced into its tasks' bodies;
a smaller one is dumped with its task. A node's text is at least 61 characters, so such
a body is kept: the task read back shares the shape object whose text is kept (a smaller
body is parsed at each read, a new shape each time, whose text would be kept for
nothing)."""

_ENDS: Final = 96
"""How many characters of each end of a body its key holds."""
_SAME_KEY: Final = 4
"""How many bodies of one key (length and ends, a shape changed in its middle) are kept."""
_SHAPE: Final = {"shape"}
_FIELDS: Final = tuple(Task.model_fields)
_AFTER_SHAPE: Final = set(_FIELDS[_FIELDS.index("shape") + 1 :])
"""The task's fields written after its shape (``model_dump_json`` keeps field order)."""
if not _AFTER_SHAPE:  # the splice (:func:`written`) cuts the rest before the fields after
    raise ImportError("a task's shape must not be its last field: its body is spliced")


class Kept:
    """Shapes by their large body texts, the newest kept within *count* and *characters*."""

    def __init__(self, count: int = KEPT, characters: int = KEPT_CHARACTERS) -> None:
        self._count = count
        self._limit = characters
        self._kept: OrderedDict[tuple[int, str, str], list[tuple[str, str, RunShape]]] = (
            OrderedDict()
        )
        """Body text's key (:func:`_key`) -> the bodies of that key, oldest first: each
        body text, the text of the rest of its task, and its parsed shape."""
        self._bodies = 0
        self._characters = 0
        self._lock = threading.Lock()  # the writer's, the reader's and the loop's threads

    def known(self, body: str) -> Task | None:
        """The task *body* holds, if it was read or written here lately: a task of its
        own, sharing only the (immutable) shape.

        Raises:
            pydantic.ValidationError: the rest of the task is not a valid task.
        """
        if len(body) < LARGE:
            return None
        with self._lock:
            same = tuple(self._kept.get(_key(body), ()))
        for text, rest, shape in same:
            if text == body:
                return Task.model_validate_json(rest).model_copy(update={"shape": shape})
        return None

    def keep(self, body: str, task: Task, rest: str | None = None) -> None:
        """Remember that *body* holds *task* (the text it parses to, or was dumped from);
        only a task with a shape is kept (the rest is parsed at each hit). *rest* is the
        task's text without its shape, if it was dumped already."""
        shape = task.shape
        if shape is None or not LARGE <= len(body) <= self._limit:
            return
        if rest is None:
            rest = task.model_dump_json(exclude=_SHAPE)
        key = _key(body)
        with self._lock:
            same = self._kept.pop(key, [])
            for index, (text, _, _) in enumerate(same):
                if text == body:
                    self._drop(same, index)
                    break
            if len(same) >= _SAME_KEY:
                self._drop(same, 0)
            same.append((body, rest, shape))
            self._kept[key] = same
            self._bodies += 1
            self._characters += len(body) + len(rest)
            while self._bodies > self._count or self._characters > self._limit:
                oldest = next(iter(self._kept))
                self._drop(self._kept[oldest], 0)
                if not self._kept[oldest]:
                    del self._kept[oldest]

    def _drop(self, same: list[tuple[str, str, RunShape]], index: int) -> None:
        """Drop the body at *index* of *same* (the lock held)."""
        dropped, dropped_rest, _ = same.pop(index)
        self._bodies -= 1
        self._characters -= len(dropped) + len(dropped_rest)

    def __len__(self) -> int:
        return self._bodies


class ShapeTexts:
    """The texts of the newest large shapes dumped, by shape object (each held, so its
    ``id`` is not another's while kept), within *count* and *characters*."""

    def __init__(self, count: int = KEPT, characters: int = KEPT_CHARACTERS) -> None:
        self._count = count
        self._limit = characters
        self._texts: OrderedDict[int, tuple[RunShape, str]] = OrderedDict()
        self._characters = 0
        self._lock = threading.Lock()

    def text(self, shape: RunShape) -> str:
        """``shape.model_dump_json()``, dumped once while kept (a frozen model of frozen
        models and tuples: its text cannot change)."""
        key = id(shape)
        with self._lock:
            kept = self._texts.get(key)
            if kept is not None and kept[0] is shape:
                self._texts.move_to_end(key)
                return kept[1]
        text = shape.model_dump_json()
        if len(text) > self._limit:
            return text
        with self._lock:
            previous = self._texts.pop(key, None)
            if previous is not None:
                self._characters -= len(previous[1])
            self._texts[key] = (shape, text)
            self._characters += len(text)
            while len(self._texts) > self._count or self._characters > self._limit:
                _, (_, dropped) = self._texts.popitem(last=False)
                self._characters -= len(dropped)
        return text

    def __len__(self) -> int:
        return len(self._texts)


KEPT_BODIES: Final = Kept()
"""This process's."""
SHAPE_TEXTS: Final = ShapeTexts()
"""This process's."""
known = KEPT_BODIES.known
keep = KEPT_BODIES.keep


def _key(body: str) -> tuple[int, str, str]:
    """What a body is looked up by: its length and its ends (the task's id comes first,
    its version last), not the whole text, which a hash would read through (0.5 million
    instructions for a 1,000-node run's 92 KB, at every read and write); a hit is then
    compared with the text kept, all of it."""
    return len(body), body[:_ENDS], body[-_ENDS:]


def written(task: Task) -> str:
    """*task* as its body (``task.model_dump_json()``, the same text), kept as what that
    text holds; a large shape's text is dumped once (:class:`ShapeTexts`)."""
    shape = task.shape
    if shape is None or len(shape.nodes) < SPLICED_NODES:
        body = task.model_dump_json()
        keep(body, task)
        return body
    rest = task.model_dump_json(exclude=_SHAPE)
    tail = task.model_dump_json(include=_AFTER_SHAPE)  # {"ended_children":..,"version":..}
    cut = len(rest) - len(tail) + 1  # rest is {...,<tail without its brace>
    body = f'{rest[:cut]}"shape":{SHAPE_TEXTS.text(shape)},{tail[1:]}'
    keep(body, task, rest)
    return body
