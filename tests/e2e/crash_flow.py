"""The workflow that the crash tests run in worker processes: a fan-out that leaves marks.

Every node body's last action before it returns is one ``os.write`` of the line
``<task id> <node> <attempt>`` to the file its input names, opened with ``O_APPEND``.
Once that call returns the line is in the kernel, which a SIGKILL of the process cannot
take back; so the file lists every node body that ran to its end, attempt by attempt.
"""

from typing import Final, TypeVar

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.retry import RetryPolicy
from tests.helpers import leave_mark

BACKOFF_S: Final = 2.0
"""The wait after the failed first attempt of ``flaky`` (when the input asks it to fail)."""
QUESTION: Final = "confirm#1"
"""The key of the question that ``confirm`` asks (when the input says so)."""
NODES: Final = ("seed", "double", "square", "flaky", "confirm", "join")


class CrashInput(BaseModel):
    """Where to leave marks, a number to compute with, and which hazards to include."""

    marks: str
    number: int
    ask: bool = False
    """``confirm`` asks the requestor for a factor instead of using 1."""
    flaky: bool = False
    """The first attempt of ``flaky`` fails, and the next waits ``BACKOFF_S``."""


class Factor(BaseModel):
    """The answer ``confirm`` asks for."""

    factor: int


_T = TypeVar("_T")

crash = Workflow("crash", version="1", input=CrashInput)


def _done(ctx: NodeContext[CrashInput], output: _T) -> _T:
    leave_mark(ctx.input.marks, ctx.task_id, ctx.node, ctx.attempt)
    return output


@crash.node(phase="seed")
async def seed(ctx: NodeContext[CrashInput]) -> int:
    await anyio.lowlevel.checkpoint()
    return _done(ctx, ctx.input.number)


@crash.node(phase="fan", deps=[seed])
async def double(ctx: NodeContext[CrashInput]) -> int:
    await anyio.lowlevel.checkpoint()
    return _done(ctx, 2 * ctx.output(seed))


@crash.node(phase="fan", deps=[seed])
async def square(ctx: NodeContext[CrashInput]) -> int:
    await anyio.lowlevel.checkpoint()
    return _done(ctx, ctx.output(seed) ** 2)


@crash.node(
    phase="fan",
    deps=[seed],
    retry=RetryPolicy(max_attempts=3, initial_delay_s=BACKOFF_S, jitter=False),
)
async def flaky(ctx: NodeContext[CrashInput]) -> int:
    await anyio.lowlevel.checkpoint()
    if ctx.input.flaky and ctx.attempt == 1:
        raise ConnectionError("the first attempt of flaky always fails")
    return _done(ctx, ctx.output(seed) + 1)


@crash.node(phase="fan", deps=[seed])
async def confirm(ctx: NodeContext[CrashInput]) -> int:
    factor = 1
    if ctx.input.ask:
        answer = await ctx.ask(f"Factor for run {ctx.input.number}?", Factor)
        factor = answer.factor
    else:
        await anyio.lowlevel.checkpoint()
    return _done(ctx, factor)


@crash.node(phase="join", deps=[double, square, flaky, confirm])
async def join(ctx: NodeContext[CrashInput]) -> dict[str, int]:
    await anyio.lowlevel.checkpoint()
    outputs = {node.name: ctx.output(node) for node in (double, square, flaky, confirm)}
    return _done(ctx, outputs)


def expected_result(number: int, factor: int = 1) -> dict[str, int]:
    """What a run of ``crash`` with this *number* (and answer) returns."""
    return {"double": 2 * number, "square": number**2, "flaky": number + 1, "confirm": factor}
