"""The fixture tools the official conformance suite calls (its ``tasks-*`` scenarios),
as taskloom workflows. Test-only, never built in: ``make conformance`` serves them with
``taskloom serve --http 127.0.0.1:PORT --workflows tests.conformance.fixtures``.
"""

import anyio
from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Question, Workflow


class Empty(BaseModel):
    """No arguments."""


class GreetInput(BaseModel):
    """Say hello."""

    name: str


greet = Workflow("greet", version="1", input=GreetInput, task_support="forbidden")


@greet.node()
async def hello(ctx: NodeContext[GreetInput]) -> str:
    return f"Hello, {ctx.input.name}!"


class ComputeInput(BaseModel):
    """Sleep for a while, then answer."""

    seconds: float = Field(default=1.0, ge=0, le=600)
    label: str = ""


slow_compute = Workflow("slow_compute", version="1", input=ComputeInput)


@slow_compute.node()
async def compute(ctx: NodeContext[ComputeInput]) -> str:
    await anyio.sleep(ctx.input.seconds)
    return f"computed {ctx.input.label or 'nothing'} in {ctx.input.seconds:g} s"


failing_job = Workflow(
    "failing_job", version="1", input=Empty, task_support="required", description="Fail."
)


@failing_job.node()
async def fail_after_a_second(ctx: NodeContext[Empty]) -> str:
    await anyio.sleep(1)
    raise RuntimeError("the job failed, as it always does")


class Promised(BaseModel):
    promised: int


protocol_error_job = Workflow(
    "protocol_error_job",
    version="1",
    input=Empty,
    output=Promised,
    description="Break its own output schema: a server fault (JSON-RPC -32603).",
)


@protocol_error_job.node()
async def broken_result(ctx: NodeContext[Empty]) -> str:
    return "not a Promised"


class DeleteInput(BaseModel):
    """Confirm, then pretend to delete."""

    filename: str


class Confirm(BaseModel):
    confirm: bool


confirm_delete = Workflow("confirm_delete", version="1", input=DeleteInput)


@confirm_delete.node()
async def ask_to_confirm(ctx: NodeContext[DeleteInput]) -> str:
    answer = await ctx.ask(f"Delete {ctx.input.filename}?", Confirm)
    return f"{'deleted' if answer.confirm else 'kept'} {ctx.input.filename}"


class Name(BaseModel):
    name: str


multi_input = Workflow("multi_input", version="1", input=Empty, description="Ask twice at once.")


@multi_input.node()
async def ask_name(ctx: NodeContext[Empty]) -> str:
    return (await ctx.ask("Your name?", Name)).name


@multi_input.node()
async def ask_confirm(ctx: NodeContext[Empty]) -> bool:
    return (await ctx.ask("Proceed?", Confirm)).confirm


@multi_input.node(deps=[ask_name, ask_confirm])
async def both(ctx: NodeContext[Empty]) -> str:
    return f"{ctx.output(ask_name)}: {'go' if ctx.output(ask_confirm) else 'stop'}"


USER_NAME = Question("user_name", "Your name?", Name)
test_tool_with_task = Workflow(
    "test_tool_with_task",
    version="1",
    input=Empty,
    task_support="required",
    asks=[USER_NAME],
    description="Ask for a name before the task exists (MRTR), then greet in the task.",
)


@test_tool_with_task.node()
async def greet_user(ctx: NodeContext[Empty]) -> str:
    return f"Hello, {ctx.answer(USER_NAME).name}!"


FIXTURES = (
    greet,
    slow_compute,
    failing_job,
    protocol_error_job,
    confirm_delete,
    multi_input,
    test_tool_with_task,
)
