"""The workflow module the docs' commands name (``--workflows myproject.flows``)."""

from pydantic import BaseModel

from taskloom import NodeContext, Workflow


class GreetInput(BaseModel):
    """Who to greet."""

    names: list[str]


greet = Workflow("greet", version="1", input=GreetInput)


@greet.node()
async def hello(ctx: NodeContext[GreetInput]) -> str:
    return "\n".join(f"Hello, {name}!" for name in ctx.input.names)
