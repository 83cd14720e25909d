"""A workflow whose node prints to stdout and answers with a large result (the stdio
transport's own writer: stray output must miss the protocol, large answers arrive whole)."""

from pydantic import BaseModel, Field

from taskloom.engine.dag import NodeContext, Workflow


class ChattyInput(BaseModel):
    """How many characters to answer with."""

    size: int = Field(ge=0, le=1_000_000)


chatty = Workflow("chatty", version="1", input=ChattyInput, description="Print, then answer.")


@chatty.node()
async def talk(ctx: NodeContext[ChattyInput]) -> str:
    print("a stray line from node code", flush=True)  # what the test is about
    return "x" * ctx.input.size
