"""Version 2 of ``greet``, loaded beside version 1 (``myproject.flows``) during a deploy
(docs/operations.md, "Upgrading")."""

from pydantic import BaseModel

from taskloom import NodeContext, Workflow


class GreetInput(BaseModel):
    """Who to greet."""

    names: list[str]


greet = Workflow("greet", version="2", input=GreetInput)


@greet.node()
async def hello(ctx: NodeContext[GreetInput]) -> str:
    return "\n".join(f"Good morning, {name}!" for name in ctx.input.names)
