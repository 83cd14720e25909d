"""A worker process for the PostgreSQL multi-process tests: ``python -m
tests.integration.pg_worker URL SCHEMA [LEASE_S]``. It prints ``ready`` once it listens and works,
then runs until it is terminated. Its polls and heartbeats are too slow to matter, so
whatever reaches it in a test came through LISTEN/NOTIFY."""

import sys

import anyio
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings

SLOW_S = 600.0


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


def settings(
    url: str,
    schema: str,
    *,
    run_worker: bool,
    poll_s: float = SLOW_S,
    lease_s: float = 3 * SLOW_S,
) -> TaskloomSettings:
    """The settings of this worker (or of a server that submits to it)."""
    return TaskloomSettings(
        database=PostgresSettings(url=url, schema_name=schema),
        workflow_modules=(__name__,),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=poll_s, lease_s=lease_s, progress_interval_s=0),
    )


async def main(url: str, schema: str, lease_s: float) -> None:
    """Work until terminated."""
    async with open_engine(settings(url, schema, run_worker=True, lease_s=lease_s)):
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if sys.argv[3:] else 3 * SLOW_S)
