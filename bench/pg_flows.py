"""The workflows of the PostgreSQL bench (``bench/postgres.py``), loaded by its workers.

``wide`` is a seed, 18 trivial leaves and a sink: 20 nodes per run. ``stamp`` is one node
that answers with the wall-clock time it started (the claim-latency probe). ``io_wait`` is
one node that awaits 20 ms of simulated I/O (the scale-out bench, ``pg_scaleout.py``).
``hang_once`` is one node whose first attempt never ends (the hand-back bench,
``pg_handback.py``).
"""

import time

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import Node, NodeContext, Workflow

WIDTH = 18


class Nothing(BaseModel):
    """No arguments."""


wide = Workflow("wide", version="1", input=Nothing, max_concurrency=32)


@wide.node(phase="seed")
async def seed(ctx: NodeContext[Nothing]) -> int:
    return 1


def _leaf(index: int) -> Node[int]:
    async def leaf(ctx: NodeContext[Nothing]) -> int:
        return index

    return wide.node(name=f"leaf_{index}", phase="spread", deps=[seed])(leaf)


_leaves = [_leaf(index) for index in range(WIDTH)]


@wide.node(phase="sum", deps=_leaves)
async def total(ctx: NodeContext[Nothing]) -> int:
    return len(_leaves)


stamp = Workflow("stamp", version="1", input=Nothing)


@stamp.node()
async def started(ctx: NodeContext[Nothing]) -> float:
    return time.time()


IO_S = 0.02
"""How long each node of ``io_wait`` awaits: simulated I/O (a call to another service)."""

io_wait = Workflow("io_wait", version="1", input=Nothing)


@io_wait.node()
async def call_out(ctx: NodeContext[Nothing]) -> str:
    await anyio.sleep(IO_S)  # an await, not CPU: the node is I/O-bound
    return "ok"


hang_once = Workflow("hang_once", version="1", input=Nothing)


@hang_once.node()
async def until_handed_back(ctx: NodeContext[Nothing]) -> int:
    if ctx.attempt == 1:
        await anyio.sleep_forever()  # until its worker stops and hands the run back
    return ctx.attempt
