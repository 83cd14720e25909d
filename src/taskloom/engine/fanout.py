"""Dynamic fan-out: the stored shape of a map node's items and of its result (ADR 0024).

A map node (``Workflow.map``) runs its function once per item of a list an upstream node
returned at run time. Each item is a node run of its own, keyed ``<map>[<index>]``
(``analyse[17]``): it has its own checkpoint, attempts, retries, timeout, interruptions
and waits, all stored like any node's. The map node itself has no row: it is settled once
every item is, and its output (the items' outputs in item order) is put together from
the items' checkpoints, so a re-run expands the same stored list to the same keys.
"""

import re
from typing import Final, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict

ItemFailurePolicy = Literal["fail", "continue"]
"""What a map does when an item fails for good: fail the run (``fail``), or go on and
report the failures to the nodes downstream (``continue``, a :class:`MapResult`)."""

OutputT = TypeVar("OutputT")

_ITEM_KEY: Final = re.compile(r"^(?P<node>[^\[\]]+)\[(?P<index>0|[1-9][0-9]*)\]$")


def item_key(node: str, index: int) -> str:
    """The node-run key of item *index* of map node *node*: ``node[index]``."""
    return f"{node}[{index}]"


def parse_item_key(key: str) -> tuple[str, int] | None:
    """``(map node, index)`` for an item key, ``None`` for a plain node's name (node
    names cannot contain brackets, so the two never collide)."""
    found = _ITEM_KEY.match(key)
    if found is None:
        return None
    return found["node"], int(found["index"])


def base_node(key: str) -> str:
    """The workflow node a node-run key belongs to (itself for a plain node)."""
    parsed = parse_item_key(key)
    return parsed[0] if parsed is not None else key


class ItemFailure(BaseModel):
    """An item of a map that failed for good (``on_item_failure="continue"``)."""

    model_config = ConfigDict(frozen=True)

    index: int
    error_type: str
    message: str


class MapResult(BaseModel, Generic[OutputT]):
    """What a ``continue`` map gives the nodes downstream.

    ``results`` has one entry per item, in item order: the item's output, or ``None``
    where the item failed; ``failures`` lists those items, by index.
    """

    model_config = ConfigDict(frozen=True)

    results: list[OutputT | None]
    failures: list[ItemFailure]

    @property
    def succeeded(self) -> list[OutputT]:
        """The outputs of the items that completed, in item order."""
        failed = {failure.index for failure in self.failures}
        return [cast(OutputT, r) for i, r in enumerate(self.results) if i not in failed]
