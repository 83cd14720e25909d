"""Workflows for the CLI tests: one that fails while a marker file exists, one that asks."""

from typing import Literal

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import MapContext, NodeContext, Workflow


class FragileInput(BaseModel):
    """While the file `marker` exists, the node `use` fails; every node run is logged to
    `marker`.log."""

    marker: str


fragile = Workflow("fragile", version="1", input=FragileInput, phases=["prepare", "use", "finish"])


async def _log(ctx: NodeContext[FragileInput]) -> None:
    async with await anyio.open_file(ctx.input.marker + ".log", "a") as log:
        await log.write(ctx.node + "\n")


@fragile.node(phase="prepare")
async def prepare(ctx: NodeContext[FragileInput]) -> int:
    await _log(ctx)
    return 20


@fragile.node(phase="use", deps=[prepare])
async def use(ctx: NodeContext[FragileInput]) -> int:
    await _log(ctx)
    if await anyio.Path(ctx.input.marker).exists():
        raise RuntimeError("the marker file exists")
    return ctx.output(prepare) + 1


@fragile.node(phase="finish", deps=[use])
async def finish(ctx: NodeContext[FragileInput]) -> int:
    await _log(ctx)
    return ctx.output(use) * 2


class Empty(BaseModel):
    """No arguments."""


class Go(BaseModel):
    """A yes-or-no answer."""

    go: bool


confirm = Workflow("confirm", version="1", input=Empty)


@confirm.node()
async def decide(ctx: NodeContext[Empty]) -> str:
    answer = await ctx.ask("Launch the rocket?", Go)
    return "launched" if answer.go else "stayed home"


class Number(BaseModel):
    """A number to double."""

    x: int


double = Workflow("double", version="1", input=Number)


@double.node()
async def times_two(ctx: NodeContext[Number]) -> int:
    return ctx.input.x * 2


family = Workflow("family", version="1", input=Number, phases=["spawn", "sum"])


@family.node(phase="spawn")
async def spawn(ctx: NodeContext[Number]) -> int:
    first: int = await ctx.child(double, {"x": ctx.input.x})
    second: int = await ctx.child(double, {"x": first})
    return second


@family.node(phase="sum", deps=[spawn])
async def total(ctx: NodeContext[Number]) -> int:
    return ctx.output(spawn) + 1


class Launch(BaseModel):
    """A form of four fields: text, a number with a default, a choice and a yes or no."""

    pilot: str = Field(title="Pilot", description="who flies")
    boosters: int = Field(default=3, title="Boosters")
    orbit: Literal["low", "high"] = Field(title="Orbit")
    crewed: bool = Field(title="Crewed")


launch = Workflow("launch", version="1", input=Empty)


@launch.node()
async def plan_launch(ctx: NodeContext[Empty]) -> dict[str, object]:
    answer = await ctx.ask(
        "Fill in the launch plan: who flies, with how many boosters, to which orbit, and"
        " whether anyone is on board (the answer is checked against the plan's rules)",
        Launch,
    )
    return answer.model_dump()


class Count(BaseModel):
    """How many items the map spreads over."""

    n: int


wide = Workflow("wide", version="1", input=Count, phases=["list", "spread"])


@wide.node(phase="list")
async def listing(ctx: NodeContext[Count]) -> list[int]:
    return list(range(ctx.input.n))


@wide.map(over=listing, phase="spread")
async def square(ctx: MapContext[Count, int]) -> int:
    return ctx.item * ctx.item
