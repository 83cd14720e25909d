"""A worker process for the PostgreSQL multi-process tests: ``python -m
tests.integration.pg_worker URL SCHEMA [LEASE_S]``. It prints ``ready`` once it listens and works,
then runs until it is terminated. Its polls and heartbeats are too slow to matter, so
whatever reaches it in a test came through LISTEN/NOTIFY. It is worker-only, as
``taskloom worker`` is: it listens to the changes a worker acts on only (ADR 0062)."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from pydantic import BaseModel

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings
from tests import postgres

SLOW_S = 600.0
ROOT = Path(__file__).resolve().parents[2]


class Numbers(BaseModel):
    n: int


double = Workflow("double", version="1", input=Numbers)


@double.node()
async def twice(ctx: NodeContext[Numbers]) -> int:
    return ctx.input.n * 2


hold = Workflow("hold", version="1", input=Numbers)


@hold.node()
async def wait_forever(ctx: NodeContext[Numbers]) -> int:
    await ctx.report(0, 1, "holding")
    await anyio.sleep_forever()
    return 0


once = Workflow("once", version="1", input=Numbers)


@once.node()
async def hang_on_first_attempt(ctx: NodeContext[Numbers]) -> int:
    if ctx.attempt == 1:
        await ctx.report(0, 1, "hanging")
        await anyio.sleep_forever()
    return ctx.attempt


two_questions = Workflow("two_questions", version="1", input=Numbers)


@two_questions.node()
async def first(ctx: NodeContext[Numbers]) -> int:
    answer = await ctx.ask("first?", {"type": "integer"})
    assert isinstance(answer, int)
    return answer


@two_questions.node()
async def second(ctx: NodeContext[Numbers]) -> int:
    answer = await ctx.ask("second?", {"type": "integer"})
    assert isinstance(answer, int)
    return answer


def settings(
    url: str,
    schema: str,
    *,
    run_worker: bool,
    worker_only: bool = False,
    poll_s: float = SLOW_S,
    lease_s: float = 3 * SLOW_S,
) -> TaskloomSettings:
    """The settings of this worker (or of a server that submits to it)."""
    return TaskloomSettings(
        database=PostgresSettings(url=url, schema_name=schema),
        workflow_modules=(__name__,),
        load_entry_points=False,
        run_worker=run_worker,
        worker_only=worker_only,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=poll_s, lease_s=lease_s, progress_interval_s=0),
    )


@asynccontextmanager
async def worker_process(schema: str, *, lease_s: float = 1800.0) -> AsyncIterator[Process]:
    """Start this module in a process of its own; terminate it on exit."""
    command = [
        *(sys.executable, "-m", "tests.integration.pg_worker"),
        *(postgres.TEST_URL, schema, str(lease_s)),
    ]
    async with await anyio.open_process(command, cwd=ROOT) as process:
        try:
            assert process.stdout is not None
            with anyio.fail_after(30):
                async for line in TextReceiveStream(process.stdout):
                    if "ready" in line:
                        break
            yield process
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.CancelScope(shield=True), anyio.fail_after(10):
                await process.wait()


@asynccontextmanager
async def server(schema: str, **changes: object) -> AsyncIterator[Engine]:
    """An engine here without a worker (as ``taskloom serve`` with separate workers)."""
    base = settings(postgres.TEST_URL, schema, run_worker=False)
    async with open_engine(base.model_copy(update=changes)) as engine:
        yield engine


async def main(url: str, schema: str, lease_s: float) -> None:
    """Work until terminated."""
    worker = settings(url, schema, run_worker=True, worker_only=True, lease_s=lease_s)
    async with open_engine(worker):
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if sys.argv[3:] else 3 * SLOW_S)
