"""Small workflows for the server tests, steered by the test through named gates."""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Question, Workflow

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


class Empty(BaseModel):
    """No arguments."""


fails = Workflow("fails", version="1", input=Empty, description="Fail with a tool error.")


@fails.node()
async def explode(ctx: NodeContext[Empty]) -> str:
    raise RuntimeError("told to fail")


class Promised(BaseModel):
    promised: int


broken = Workflow(
    "broken", version="1", input=Empty, output=Promised, description="Break its output schema."
)


@broken.node()
async def wrong_shape(ctx: NodeContext[Empty]) -> str:
    return "not what the output schema promised"


class Confirm(BaseModel):
    confirm: bool


ask_two = Workflow("ask_two", version="1", input=Empty, description="Ask two questions at once.")


@ask_two.node()
async def first_question(ctx: NodeContext[Empty]) -> str:
    return (await ctx.ask("Your name?", Name)).name


@ask_two.node()
async def second_question(ctx: NodeContext[Empty]) -> bool:
    return (await ctx.ask("Sure?", Confirm)).confirm


@ask_two.node(deps=[first_question, second_question])
async def combine(ctx: NodeContext[Empty]) -> str:
    sure = ctx.output(second_question)
    return f"{ctx.output(first_question)} {'is' if sure else 'is not'} sure"


NAME_FIRST = Question("user_name", "Your name?", Name)
CONFIRM_FIRST = Question("go", "Go ahead?", Confirm)
asks_first = Workflow(
    "asks_first",
    version="1",
    input=AskInput,
    asks=[NAME_FIRST, CONFIRM_FIRST],
    description="Ask two questions before the task exists, then greet.",
)


@asks_first.node()
async def greet_after_asking(ctx: NodeContext[AskInput]) -> str:
    mark = "!" if ctx.answer(CONFIRM_FIRST).confirm else "?"
    return f"Hello, {ctx.answer(NAME_FIRST).name}{mark}"


class HelloInput(BaseModel):
    """Say hello at once (never a task)."""

    name: str


hello_now = Workflow("hello_now", version="1", input=HelloInput, task_support="forbidden")


@hello_now.node()
async def say_hello(ctx: NodeContext[HelloInput]) -> str:
    return f"Hello, {ctx.input.name}!"


pause = Workflow(
    "pause", version="1", input=GateInput, description="Wait on a gate (no output model)."
)


@pause.node()
async def pause_at_gate(ctx: NodeContext[GateInput]) -> str:
    await gate(ctx.input.gate).wait()
    return f"opened {ctx.input.gate}"


pause_again = Workflow(
    "pause_again",
    version="1",
    input=GateInput,
    description="Wait on a gate; a repeated call starts another run.",
    join_repeats=False,
)


@pause_again.node()
async def pause_again_at_gate(ctx: NodeContext[GateInput]) -> str:
    await gate(ctx.input.gate).wait()
    return f"opened {ctx.input.gate} again"
