"""The workflow the map crash test runs in worker processes: a map whose items leave marks.

Each item's body sleeps a time that depends on its index (so items end out of order),
then, as its last action before it returns, appends ``<task id> work[<index>] <attempt>``
to the marks file with one ``O_APPEND`` write (``tests.helpers.leave_mark``): the file
lists every item body that ran to its end, even across a SIGKILL.
"""

from typing import Final

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from tests.helpers import leave_mark

CONCURRENCY: Final = 4


class MapInput(BaseModel):
    """Where to leave marks, and how many items to map over."""

    marks: str
    count: int


mapping = Workflow("mapping", version="1", input=MapInput, phases=["list", "work", "collect"])


def item_seconds(index: int) -> float:
    """How long item *index* takes: 20 to 100 ms, out of index order."""
    return 0.02 * (1 + (index * 7) % 5)


def item_output(index: int) -> str:
    """What item *index* returns."""
    return f"item-{index}"


@mapping.node(phase="list")
async def items(ctx: NodeContext[MapInput]) -> list[int]:
    return list(range(ctx.input.count))


@mapping.map(over=items, phase="work", concurrency=CONCURRENCY)
async def work(ctx: MapContext[MapInput, int]) -> str:
    await anyio.sleep(item_seconds(ctx.index))
    leave_mark(ctx.input.marks, ctx.task_id, f"work[{ctx.index}]", ctx.attempt)
    return item_output(ctx.item)


@mapping.node(phase="collect", deps=[work])
async def collect(ctx: NodeContext[MapInput]) -> list[str]:
    return ctx.output(work)
