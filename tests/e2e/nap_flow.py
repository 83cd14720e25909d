"""A workflow that sleeps for as long as its input says (the fairness tests' long and
short tasks)."""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Workflow


class NapInput(BaseModel):
    """How long to sleep."""

    seconds: float = Field(ge=0, le=600)


nap = Workflow("nap", version="1", input=NapInput, description="Sleep, then say so.")


@nap.node()
async def sleep(ctx: NodeContext[NapInput]) -> str:
    await anyio.sleep(ctx.input.seconds)
    return f"slept {ctx.input.seconds:g} s"
