"""A worker process for the PostgreSQL multi-process tests: ``python -m
tests.integration.pg_worker URL SCHEMA [LEASE_S]``. It prints ``ready APPLICATION_NAME``
(what its connections are called in ``pg_stat_activity``) once it listens and works, then
runs until it is killed, or stopped by SIGTERM or SIGINT as ``taskloom worker`` is: the
engine closes, recording the attempts in flight as interrupted and handing their runs back,
and the process exits 0. Its polls and heartbeats are too slow to matter, so whatever
reaches it in a test came through LISTEN/NOTIFY. It is worker-only, as ``taskloom worker``
is: it listens to the changes a worker acts on only (ADR 0062)."""

import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from pydantic import BaseModel

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.postgres.driver import application_name
from tests import postgres
from tests.helpers import helper_process, leave_mark

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


@two_questions.node(name="first")
async def first_question(ctx: NodeContext[Numbers]) -> int:
    answer = await ctx.ask("first?", {"type": "integer"})
    assert isinstance(answer, int)
    return answer


@two_questions.node(name="second")
async def second_question(ctx: NodeContext[Numbers]) -> int:
    answer = await ctx.ask("second?", {"type": "integer"})
    assert isinstance(answer, int)
    return answer


asker = Workflow("asker", version="1", input=Numbers)
"""One node asks while the other runs on: the run stays leased in ``input_required``
(not parked) until ``busy`` ends; ``busy``'s first attempt never does."""


@asker.node(name="asks")
async def asks(ctx: NodeContext[Numbers]) -> int:
    answer = await ctx.ask("a number?", {"type": "integer"})
    assert isinstance(answer, int)
    return answer


@asker.node(name="busy")
async def busy(ctx: NodeContext[Numbers]) -> int:
    if ctx.attempt == 1:
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
    """This module in a process of its own, once ready; on leaving, unless the test
    killed it, stopped by SIGTERM, which it must take as ``taskloom worker`` does (a
    clean stop, exit status 0, checked by ``helper_process``)."""
    command = [
        *(sys.executable, "-m", "tests.integration.pg_worker"),
        *(postgres.TEST_URL, schema, str(lease_s)),
    ]
    async with helper_process(command, cwd=ROOT, stop_s=10) as worker:
        yield worker.process


@asynccontextmanager
async def server(schema: str, **changes: object) -> AsyncIterator[Engine]:
    """An engine here without a worker (as ``taskloom serve`` with separate workers)."""
    base = settings(postgres.TEST_URL, schema, run_worker=False)
    async with open_engine(base.model_copy(update=changes)) as engine:
        yield engine


async def main(url: str, schema: str, lease_s: float) -> None:
    """Work until SIGTERM or SIGINT (the receiver is there before ``ready``)."""
    worker = settings(url, schema, run_worker=True, worker_only=True, lease_s=lease_s)
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as stop:
        async with open_engine(worker) as engine:
            assert isinstance(engine.runs, PostgresTaskStore)
            print("ready", application_name(engine.runs.origin), flush=True)
            async for _ in stop:
                break


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]) if sys.argv[3:] else 3 * SLOW_S)
