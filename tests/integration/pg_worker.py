"""A worker process for the PostgreSQL multi-process tests: ``python -m
tests.integration.pg_worker URL SCHEMA [LEASE_S]``. It prints ``ready APPLICATION_NAME``
(what its connections are called in ``pg_stat_activity``) once it listens and works, then
runs until it is killed, or stopped by SIGTERM or SIGINT as ``taskloom worker`` is: the
engine closes, recording the attempts in flight as interrupted and handing their runs back,
and the process exits 0. Its polls and heartbeats are too slow to matter, so whatever
reaches it in a test came through LISTEN/NOTIFY."""

import signal
import sys

import anyio
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.postgres.driver import application_name
from tests.helpers import leave_mark

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


class Window(BaseModel):
    """Where the nodes leave their marks, which node's first attempt is held, and the
    file that lets it go on."""

    marks: str
    held: str
    go: str


window = Workflow("window", version="1", input=Window)
"""Two nodes, ``first`` then ``last``, each leaving a completion mark (``leave_mark``) as
its body's last action; the ``held`` one's first attempt waits for the ``go`` file first,
so that the test can hold the write of its end before its body returns."""


async def _ended(ctx: NodeContext[Window], output: str) -> str:
    if ctx.node == ctx.input.held and ctx.attempt == 1:
        # the test creates the file (in its own process: no event) once it holds the end
        while not await anyio.Path(ctx.input.go).exists():  # noqa: ASYNC110
            await anyio.sleep(0.01)
    leave_mark(ctx.input.marks, ctx.task_id, ctx.node, ctx.attempt)
    return output


@window.node()
async def first(ctx: NodeContext[Window]) -> str:
    return await _ended(ctx, f"first by attempt {ctx.attempt}")


@window.node(deps=[first])
async def last(ctx: NodeContext[Window]) -> str:
    return await _ended(ctx, f"{ctx.output(first)}, last by attempt {ctx.attempt}")


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
    """Work until SIGTERM or SIGINT (the receiver is there before ``ready``)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as stop:
        async with open_engine(settings(url, schema, run_worker=True, lease_s=lease_s)) as engine:
            assert isinstance(engine.runs, PostgresTaskStore)
            print("ready", application_name(engine.runs.origin), flush=True)
            async for _ in stop:
                break


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if sys.argv[3:] else 3 * SLOW_S)
