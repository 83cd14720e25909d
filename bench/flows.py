"""The bench's workflows for ``taskloom serve --workflows flows`` (with ``bench/`` on the path).

``noop`` is the trivial task: one node that answers at once. ``hold`` sleeps for
``seconds`` (for cancel latency and for kill -9 of a server with a task in flight).
``wide`` holds 100 nodes running side by side (for the memory of a busy server).
"""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Workflow


class Nothing(BaseModel):
    """No arguments."""


class HoldInput(BaseModel):
    """How long to hold."""

    seconds: float = Field(default=60.0, ge=0, le=3600)


noop = Workflow("noop", version="1", input=Nothing, description="Answer at once.")


@noop.node()
async def answer(ctx: NodeContext[Nothing]) -> str:
    return "ok"


hold = Workflow("hold", version="1", input=HoldInput, description="Sleep, then answer.")


@hold.node()
async def sleep(ctx: NodeContext[HoldInput]) -> str:
    await anyio.sleep(ctx.input.seconds)
    return "ok"


WIDTH = 100
"""Nodes of ``wide``, all running at once."""

wide = Workflow(
    "wide",
    version="1",
    input=HoldInput,
    max_concurrency=WIDTH,
    description=f"{WIDTH} nodes that sleep side by side (for memory with many nodes running).",
)

for _index in range(WIDTH):

    async def _hold(ctx: NodeContext[HoldInput]) -> str:
        await anyio.sleep(ctx.input.seconds)
        return "ok"

    wide.node(name=f"hold_{_index}")(_hold)
