"""`taskloom worker`'s log on PostgreSQL: one line per change of the runs it executes,
and no read of another process's tasks for it (docs/cli.md; ADR 0050 noted that the log's
subscription made every worker read every change the database announced)."""

import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.models import Task
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.observability.change_lines import log_changes
from taskloom.persistence.postgres import PostgresSettings
from taskloom.workflows.countdown import countdown
from tests import postgres
from tests.helpers import checkout_env, eventually

REPOSITORY = Path(__file__).resolve().parents[2]
TASKS = 12


class Empty(BaseModel):
    pass


elsewhere = Workflow("elsewhere", version="1", input=Empty)


@elsewhere.node()
async def done(ctx: NodeContext[Empty]) -> str:
    return "done"


unloaded = Workflow("unloaded", version="1", input=Empty)


@unloaded.node()
async def never(ctx: NodeContext[Empty]) -> str:
    return "never run here"


async def test_the_log_neither_prints_nor_reads_another_process_s_runs(
    database: PostgresSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A's worker cannot run `elsewhere`; another engine queues twelve and a third runs
    them. A reads a new run once, to see whether it may claim it (its worker's wants),
    never its claim or its end, and its log prints none of them."""
    settings = TaskloomSettings(database=database, load_entry_points=False)
    async with open_engine(settings, workflows=WorkflowRegistry({"unloaded": unloaded})) as here:
        assert here.worker is not None
        reads: list[str] = []
        awaited: dict[str, anyio.Event] = {}
        read = here.manager.get

        async def counted(task_id: str, **kwargs: object) -> Task:
            reads.append(task_id)
            if task_id in awaited:
                awaited[task_id].set()
            return await read(task_id, **kwargs)  # type: ignore[arg-type]

        here.manager.get = counted  # type: ignore[method-assign]
        async with anyio.create_task_group() as logging:
            await logging.start(log_changes, here.manager, here.worker)
            registry = WorkflowRegistry({"elsewhere": elsewhere})
            submitting = settings.model_copy(update={"run_worker": False})
            async with (
                open_engine(settings, workflows=registry) as there,
                open_engine(submitting, workflows=registry) as client,
            ):
                ids = [(await submit(client.manager, elsewhere)).id for _ in range(TASKS)]
                for task_id in ids:
                    with anyio.fail_after(30):
                        ended = await there.manager.wait_until_terminal(task_id)
                    assert ended.state is TaskState.COMPLETED
                # PostgreSQL delivers the announcements in commit order: once A has read
                # the last one, it has been told of every change before it.
                last = (await submit(client.manager, elsewhere)).id
                if last not in reads:
                    awaited[last] = anyio.Event()
                    with anyio.fail_after(30):
                        await awaited[last].wait()
            logging.cancel_scope.cancel()
    announced = set(ids)
    assert sorted(task_id for task_id in reads if task_id in announced) == sorted(ids), reads
    err = capsys.readouterr().err
    assert not any(task_id in err for task_id in ids), err


@pytest.fixture
def database_url() -> Iterator[str]:
    with postgres.private_database() as url:
        yield url


def _shows(*logs: Path, text: str) -> Callable[[], Awaitable[bool]]:
    """Whether one of *logs* holds *text* (for ``eventually``)."""

    async def shown() -> bool:
        return any(text in log.read_text() for log in logs)

    return shown


def _worker(url: str, log: Path) -> "subprocess.Popen[str]":
    env = checkout_env()
    argv = [sys.executable, "-m", "taskloom", "worker", "--db", url, "--log-format", "text"]
    with log.open("w") as stderr:
        return subprocess.Popen(argv, stderr=stderr, text=True, env=env, cwd=log.parent)


async def test_two_workers_each_log_only_the_runs_they_executed(
    database_url: str, tmp_path: Path
) -> None:
    """Docs (cli.md): a worker prints one line per state change of the tasks it runs.
    Each run is printed, running then completed, by exactly one of two workers."""
    settings = TaskloomSettings(database=PostgresSettings(url=database_url))
    async with open_engine(settings.model_copy(update={"run_worker": False})):
        pass  # migrated before the workers open it
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    workers = [_worker(database_url, log) for log in logs]
    try:
        for log in logs:
            await eventually(_shows(log, text="runs: "), within_s=60)
        async with open_engine(settings.model_copy(update={"run_worker": False})) as client:
            arguments = {"start": 2, "tick_s": 0}
            ids = [(await submit(client.manager, countdown, arguments)).id for _ in range(TASKS)]
            for task_id in ids:
                with anyio.fail_after(60):
                    task = await client.manager.wait_until_terminal(task_id, recheck_every=0.2)
                assert task.state is TaskState.COMPLETED
        for task_id in ids:  # a worker prints a run's end just after writing it
            await eventually(_shows(*logs, text=f"{task_id} completed"), within_s=30)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
    printed = [log.read_text() for log in logs]
    assert all(worker.returncode == 0 for worker in workers), printed
    for task_id in ids:
        holders = [text for text in printed if task_id in text]
        assert len(holders) == 1, (task_id, printed)
        lines = re.findall(rf"UTC  countdown {task_id} (\w+)", holders[0])
        assert lines == ["running", "completed"], (task_id, printed)
