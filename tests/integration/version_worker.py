"""A worker process with some versions of ``vflow`` loaded, for the deploy tests (ADR
0039): ``python -m tests.integration.version_worker DB VERSIONS [SCHEMA]``. DB is an
SQLite file or a PostgreSQL URL (then SCHEMA is its schema); VERSIONS is e.g. ``1,2``.
It prints ``ready`` once it works, then runs until it is killed, or stopped by SIGTERM or
SIGINT as ``taskloom worker`` is: the engine closes (the attempts in flight recorded as
interrupted, their runs handed back, its process record dropped) and it exits 0."""

import signal
import sys

import anyio
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.factory import database_settings
from taskloom.persistence.postgres import PostgresSettings

LEASE_S = 1.5


class Job(BaseModel):
    n: int = 0
    ask: bool = False
    """Ask a question (and wait for the answer) before the last node."""
    until: str = ""
    """A file: the middle node works until it exists, so that a run is in flight when
    its worker is killed, however long the test took to get there."""


class Go(BaseModel):
    go: bool


def vflow(version: str) -> Workflow[Job]:
    """``vflow`` at *version*: every node says which version ran it."""
    flow = Workflow("vflow", version=version, input=Job)

    @flow.node()
    async def start(ctx: NodeContext[Job]) -> str:
        return f"started by {version}"

    @flow.node(deps=[start])
    async def work(ctx: NodeContext[Job]) -> str:
        # the test creates the file (in its own process: no event) once the run may end
        while ctx.input.until and not await anyio.Path(ctx.input.until).exists():  # noqa: ASYNC110
            await anyio.sleep(0.05)
        return f"worked by {version}"

    @flow.node(deps=[start, work])
    async def finish(ctx: NodeContext[Job]) -> str:
        if ctx.input.ask:
            await ctx.ask("Finish?", Go)
        return f"{ctx.output(start)}, {ctx.output(work)}, finished by {version}"

    return flow


def registry(versions: str) -> WorkflowRegistry:
    """A registry with these comma-separated versions of ``vflow``."""
    loaded = WorkflowRegistry()
    for version in versions.split(","):
        loaded.register(vflow(version))
    return loaded


def settings(db: str, schema: str | None, *, run_worker: bool = True) -> TaskloomSettings:
    database = database_settings(db)
    if schema is not None:
        database = PostgresSettings(url=db, schema_name=schema)
    return TaskloomSettings(
        database=database,
        workflow_modules=(),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=0.1, lease_s=LEASE_S, progress_interval_s=0),
    )


async def main(db: str, versions: str, schema: str | None) -> None:
    """Work until SIGTERM or SIGINT (the receiver is there before ``ready``)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as stop:
        async with open_engine(settings(db, schema), workflows=registry(versions)):
            print("ready", flush=True)
            async for _ in stop:
                break


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if sys.argv[3:] else None)
