"""The workflow of the PostgreSQL chaos test: a diamond of four nodes that leave marks.

Every node body's last action before it returns is one ``os.write`` of the line
``<task id> <node> <attempt>`` to the file its input names, opened with ``O_APPEND``:
once the call returns the line is in the kernel, which a SIGKILL cannot take back, so
the file lists every node body that ran to its end, attempt by attempt.
"""

from typing import Final, TypeVar

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from tests.helpers import leave_mark

NODES: Final = ("seed", "double", "square", "join")
NODE_S: Final = 0.3
"""A node's simulated work: the runs must still be in flight when the kills come (1 to
2 s apart), or none changes workers midway. With nodes that only yielded, a fast
machine finished the 500 runs around the first kill (2 runs of 500 moved)."""


class ChaosInput(BaseModel):
    """Where to leave marks, and a number to compute with."""

    marks: str
    number: int


_T = TypeVar("_T")

chaos = Workflow("chaos", version="1", input=ChaosInput)


def _done(ctx: NodeContext[ChaosInput], output: _T) -> _T:
    leave_mark(ctx.input.marks, ctx.task_id, ctx.node, ctx.attempt)
    return output


@chaos.node(phase="seed")
async def seed(ctx: NodeContext[ChaosInput]) -> int:
    await anyio.sleep(NODE_S)  # its work, not synchronisation
    return _done(ctx, ctx.input.number)


@chaos.node(phase="fan", deps=[seed])
async def double(ctx: NodeContext[ChaosInput]) -> int:
    await anyio.sleep(NODE_S)  # its work, not synchronisation
    return _done(ctx, 2 * ctx.output(seed))


@chaos.node(phase="fan", deps=[seed])
async def square(ctx: NodeContext[ChaosInput]) -> int:
    await anyio.sleep(NODE_S)  # its work, not synchronisation
    return _done(ctx, ctx.output(seed) ** 2)


@chaos.node(phase="join", deps=[double, square])
async def join(ctx: NodeContext[ChaosInput]) -> list[int]:
    await anyio.sleep(NODE_S)  # its work, not synchronisation
    return _done(ctx, [ctx.output(double), ctx.output(square)])


def expected_result(number: int) -> list[int]:
    """What a run of ``chaos`` with this *number* returns."""
    return [2 * number, number**2]
