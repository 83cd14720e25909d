"""A process killed between the commit of an eager create and the run's start (ADR 0046).

The create committed the task ``running`` with the creating worker's lease, and no node
started. Another process, already serving the same database (so it holds another
worker slot and cannot take the dead one's runs back at once), takes the run once the
lease has expired and completes it: every node runs once, no attempt is recorded as
interrupted, and nothing the create committed is lost.
"""

import json
import signal
import sqlite3
import sys
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Final

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from taskloom.engine.history import Cause
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore
from tests.e2e.crash_flow import NODES, expected_result
from tests.helpers import checkout_env

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S: Final = 40.0


def _command(mode: str, database: Path) -> list[str]:
    return [sys.executable, "-m", "tests.e2e.eager_child", mode, str(database)]


def _environment() -> dict[str, str]:
    return checkout_env()


async def _next_line(stream: TextReceiveStream) -> str:
    line = ""
    while "\n" not in line:
        line += await stream.receive()
    return line.strip()


def _right_after_the_kill(database: Path, task_id: str) -> tuple[str, str, int, int]:
    """The task's state and its lease's worker, and how many node attempts and history
    rows there are, read without writing."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as raw:
        body = raw.execute("SELECT body FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]
        (worker,) = raw.execute(
            "SELECT worker FROM leases WHERE task_id = ?", (task_id,)
        ).fetchone()
        (attempts,) = raw.execute("SELECT count(*) FROM node_attempts").fetchone()
        (rows,) = raw.execute("SELECT count(*) FROM task_history").fetchone()
    return json.loads(body)["state"], worker, attempts, rows


async def test_an_eager_run_whose_process_died_before_it_started_runs_after_its_lease(
    tmp_path: Path,
) -> None:
    database = tmp_path / "tasks.db"
    with anyio.fail_after(CHILD_LIMIT_S):
        async with await anyio.open_process(
            _command("serve", database), cwd=ROOT, env=_environment()
        ) as survivor:
            assert survivor.stdout is not None
            output = TextReceiveStream(survivor.stdout)
            assert await _next_line(output) == "ready"
            creator = await anyio.run_process(
                _command("create", database), check=False, cwd=ROOT, env=_environment()
            )
            assert creator.returncode == -signal.SIGKILL, creator.stderr.decode()
            record = json.loads(database.with_name("tasks.db.kill").read_text().splitlines()[-1])
            task_id, dead, expired = record["task"], record["worker"], record["expires_at"]
            state, holder, attempts, rows = _right_after_the_kill(database, task_id)
            assert (state, holder, attempts, rows) == ("running", dead, 0, 2)
            assert await _next_line(output) == "terminal"
            assert await survivor.wait() == 0

    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store)
        task, history = await manager.history(task_id)
        tried = await store.attempts(task.id)
        nodes = await store.checkpoints(task.id)
    assert task.state is TaskState.COMPLETED
    assert task.result == expected_result(1)
    causes = [(entry.version, entry.cause) for entry in history]
    assert causes[:2] == [(1, Cause.CREATED), (2, Cause.CLAIMED)]  # no second claim: a lease
    assert causes[-1] == (task.version, Cause.COMPLETED)  # taken over moves no state
    assert Cause.REQUEUED not in {cause for _, cause in causes}
    assert sorted(nodes) == sorted(NODES)
    assert {(run.attempt, run.interruptions) for run in nodes.values()} == {(1, 0)}
    assert sorted(attempt.node for attempt in tried) == sorted(NODES)
    assert {attempt.outcome for attempt in tried} == {AttemptOutcome.COMPLETED}
    assert all(attempt.worker != dead for attempt in tried)
    assert min(attempt.started_at for attempt in tried) >= datetime.fromisoformat(expired)
    marks = (tmp_path / "marks").read_text().splitlines()
    assert sorted(line.split()[1] for line in marks) == sorted(NODES)
