"""`countdown`: a tiny workflow with phases, progress and an optional failure.

For docs, demos and tests: it counts down in parallel "ticks", reports progress, and can
be told to fail at a given tick (to show retries and failure reports).
"""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.retry import RetryPolicy


class CountdownInput(BaseModel):
    """Count down from `start`, pausing `tick_s` per number, in four parallel lanes."""

    start: int = Field(default=8, ge=1, le=10_000)
    tick_s: float = Field(default=0.05, ge=0, le=60)
    fail_at: int | None = Field(default=None, description="fail when this number is reached")


class CountdownResult(BaseModel):
    """What a finished countdown reports."""

    counted: int
    lanes: int


LANES = 4


countdown = Workflow(
    "countdown",
    version="1",
    input=CountdownInput,
    output=CountdownResult,
    title="Countdown",
    description="Count down in parallel lanes with progress; optionally fail on purpose.",
    phases=["plan", "count", "report"],
)


@countdown.node(phase="plan")
async def plan(ctx: NodeContext[CountdownInput]) -> list[list[int]]:
    """Split the numbers from `start` down to 1 between the lanes."""
    numbers = list(range(ctx.input.start, 0, -1))
    return [numbers[lane::LANES] for lane in range(LANES)]


def _lane(index: int) -> None:
    @countdown.node(
        name=f"lane_{index}",
        phase="count",
        deps=[plan],
        retry=RetryPolicy(max_attempts=2, initial_delay_s=0.01, max_delay_s=0.1),
    )
    async def count_lane(ctx: NodeContext[CountdownInput]) -> int:
        mine = ctx.output(plan)[index]
        for done, number in enumerate(mine, start=1):
            if number == ctx.input.fail_at:
                raise RuntimeError(f"told to fail at {number}")
            await anyio.sleep(ctx.input.tick_s)
            await ctx.report(done, len(mine), "numbers")
        return len(mine)


for _index in range(LANES):
    _lane(_index)


@countdown.node(phase="report", deps=[f"lane_{index}" for index in range(LANES)])
async def report(ctx: NodeContext[CountdownInput]) -> CountdownResult:
    """Add up what the lanes counted."""
    return CountdownResult(counted=ctx.input.start, lanes=LANES)
