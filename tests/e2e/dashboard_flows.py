"""Workflows the dashboard's browser tests run in a real ``taskloom serve --http``.

``pipeline`` walks three phases, a map of four items in the middle, each node taking a
moment (so a browser sees nodes change state); ``approval`` asks a question first,
``sign_off`` two in turn;
``crawl`` runs until cancelled; ``fragile`` fails in ``parse`` while the file named by
``TASKLOOM_E2E_BROKEN`` exists, so it can be resumed once that file is gone.
"""

import os

import anyio
from pydantic import BaseModel, JsonValue

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.retry import RetryPolicy

STEP_S = 0.8


class Empty(BaseModel):
    pass


pipeline = Workflow("pipeline", version="1", input=Empty)


@pipeline.node(phase="fetch")
async def fetch(ctx: NodeContext[Empty]) -> list[int]:
    await anyio.sleep(STEP_S)
    return [1, 2, 3, 4]


@pipeline.node(phase="fetch")
async def settings(ctx: NodeContext[Empty]) -> int:
    await anyio.sleep(STEP_S / 2)
    return 10


@pipeline.map(over=fetch, phase="analyse", concurrency=2)
async def score(ctx: MapContext[Empty, int]) -> int:
    await anyio.sleep(STEP_S)
    return ctx.item * 2


@pipeline.node(phase="report", deps=[score, settings])
async def report(ctx: NodeContext[Empty]) -> int:
    await anyio.sleep(STEP_S)
    scores: list[int] = ctx.output(score)
    return sum(scores) + ctx.output(settings)


approval = Workflow("approval", version="1", input=Empty)


@approval.node(phase="ask")
async def decide(ctx: NodeContext[Empty]) -> str:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Approve the release"},
            "reviewer": {"type": "string", "title": "Reviewer", "minLength": 2},
            "level": {"type": "string", "enum": ["low", "high"], "title": "Risk"},
        },
        "required": ["reviewer"],
    }
    answer = await ctx.ask("Release version 2.0?", schema)
    assert isinstance(answer, dict)
    return f"{'approved' if answer.get('approve') else 'rejected'} by {answer['reviewer']}"


sign_off = Workflow("sign_off", version="1", input=Empty)


def _one_name(title: str) -> dict[str, JsonValue]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "title": title}},
        "required": ["name"],
    }


@sign_off.node(phase="ask")
async def sign(ctx: NodeContext[Empty]) -> str:
    reviewer = await ctx.ask("Who reviews?", _one_name("Reviewer"))
    signer = await ctx.ask("Who signs off?", _one_name("Signer"))
    assert isinstance(reviewer, dict)
    assert isinstance(signer, dict)
    return f"reviewed by {reviewer['name']}, signed by {signer['name']}"


crawl = Workflow("crawl", version="1", input=Empty)


@crawl.node(phase="crawl")
async def walk(ctx: NodeContext[Empty]) -> int:
    await anyio.sleep(3600)
    return 0


fragile = Workflow("fragile", version="1", input=Empty)


@fragile.node(phase="get")
async def download(ctx: NodeContext[Empty]) -> int:
    return 20


@fragile.node(phase="work", deps=[download], retry=RetryPolicy(max_attempts=2, initial_delay_s=0.1))
async def parse(ctx: NodeContext[Empty]) -> int:
    if await anyio.Path(os.environ["TASKLOOM_E2E_BROKEN"]).exists():
        raise RuntimeError("the input file is truncated")
    return ctx.output(download) + 1


@fragile.node(phase="work", deps=[parse])
async def publish(ctx: NodeContext[Empty]) -> int:
    return ctx.output(parse) * 2
