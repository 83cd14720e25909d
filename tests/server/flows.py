"""Small workflows for the server tests, steered by the test through named gates."""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Workflow

GATES: dict[str, anyio.Event] = {}
"""Events a ``gated`` run waits on, by the ``gate`` argument; the test opens them."""


def gate(name: str) -> anyio.Event:
    """The gate *name* (created on first use)."""
    return GATES.setdefault(name, anyio.Event())


class GateInput(BaseModel):
    """Wait until the test opens the gate, then report it."""

    gate: str = Field(min_length=1)


class GateOutput(BaseModel):
    opened: str


gated = Workflow(
    "gated", version="1", input=GateInput, output=GateOutput, description="Wait on a gate."
)


@gated.node()
async def wait_for_gate(ctx: NodeContext[GateInput]) -> GateOutput:
    await gate(ctx.input.gate).wait()
    return GateOutput(opened=ctx.input.gate)


must_task = Workflow(
    "must_task", version="1", input=GateInput, task_support="required", title="Task only"
)


@must_task.node()
async def wait_then_answer(ctx: NodeContext[GateInput]) -> str:
    await gate(ctx.input.gate).wait()
    return "done"


class AskInput(BaseModel):
    """Ask the requestor for a name, then greet them."""

    question: str = "Your name?"


class Name(BaseModel):
    name: str


ask = Workflow("ask", version="1", input=AskInput, description="Ask for a name.")


@ask.node()
async def greet(ctx: NodeContext[AskInput]) -> str:
    answer = await ctx.ask(ctx.input.question, Name)
    return f"Hello, {answer.name}!"
