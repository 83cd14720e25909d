"""A worker process SIGKILLed from outside while a map is half done, then restarted.

The run maps over ``COUNT`` items (``map_flow.py``); each item body appends a completion
mark to a file as its last action, so the marks count the executions. The test kills
the worker once ``KILL_AFTER`` items are checkpointed, reads the database and the marks
as the kill left them, starts a fresh worker (it takes the dead one's slot, so it
resumes at once), and checks:

- the run completes with every item's output, in item order (items end out of order);
- no item checkpointed before the kill runs again: its row is unchanged and it has one
  mark, left before the kill;
- an item body runs more than once only in the at-least-once window (its body returned,
  its checkpoint had not committed): its earlier attempt is recorded as interrupted.
"""

import signal
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from typing import Final

import anyio
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.sqlite import SqliteTaskStore
from tests.e2e.map_flow import CONCURRENCY, item_output, mapping
from tests.e2e.test_crash_resume import Snapshot
from tests.helpers import checkout_env, eventually

pytestmark = pytest.mark.slow

COUNT: Final = 40
KILL_AFTER: Final = 12
ROOT: Final = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S: Final = 60.0


def _command(database: Path) -> tuple[list[str], dict[str, str]]:
    command = [sys.executable, "-m", "tests.e2e.map_child", str(database)]
    return command, checkout_env()


def _completed_items(database: Path) -> int:
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as raw:
        (count,) = raw.execute(
            "SELECT count(*) FROM node_runs WHERE node LIKE 'work[%' AND state = 'completed'"
        ).fetchone()
    return int(count)


async def _kill_half_way(database: Path) -> None:
    """Start a worker and SIGKILL it once ``KILL_AFTER`` items are checkpointed."""
    command, env = _command(database)
    async with await anyio.open_process(command, cwd=ROOT, env=env) as process:
        assert process.stdout is not None
        try:
            with anyio.fail_after(CHILD_LIMIT_S):
                assert (await process.stdout.receive()).startswith(b"ready")

            async def enough_done() -> bool:
                return _completed_items(database) >= KILL_AFTER

            await eventually(enough_done, within_s=CHILD_LIMIT_S, every_s=0.005)
        finally:
            process.kill()
        assert await process.wait() == -signal.SIGKILL


async def test_a_map_killed_half_way_runs_no_finished_item_again(tmp_path: Path) -> None:
    database = tmp_path / "map.db"
    async with SqliteTaskStore.open(database) as store:
        arguments = {"marks": str(tmp_path / "marks"), "count": COUNT}
        task_id = (await submit(TaskManager(store), mapping, arguments)).id

    await _kill_half_way(database)
    before = Snapshot.copy(database, tmp_path / "killed")
    keys = [f"work[{index}]" for index in range(COUNT)]
    done_before = [
        key
        for key in keys
        if (row := before.nodes.get((task_id, key))) is not None and row.state == "completed"
    ]
    assert KILL_AFTER <= len(done_before) < COUNT, "the kill did not land half way"
    assert before.tasks[task_id].state is TaskState.RUNNING

    command, env = _command(database)
    with anyio.fail_after(CHILD_LIMIT_S):
        restarted = await anyio.run_process(command, cwd=ROOT, env=env, check=False)
    assert restarted.returncode == 0, restarted.stderr.decode()
    assert restarted.stdout.decode().split() == ["ready", "terminal"]
    after = Snapshot.read(database)

    task = after.tasks[task_id]
    assert task.state is TaskState.COMPLETED, task.error
    assert task.result == [item_output(index) for index in range(COUNT)]
    assert after.leases == 0
    for key in done_before:  # never ran again: same row, one mark, left before the kill
        assert after.nodes[task_id, key] == before.nodes[task_id, key]
        assert after.marked(task_id, key) == before.marked(task_id, key) == [1]
        assert after.history(task_id, key) == [(1, "completed")]
    for key in keys:
        history = after.history(task_id, key)
        assert history[-1][1] == "completed"
        assert all(outcome == "interrupted" for _, outcome in history[:-1])
        assert history[-1][0] in after.marked(task_id, key)
        for attempt in after.marked(task_id, key):
            assert attempt == history[-1][0] or history[attempt - 1][1] == "interrupted"
    executions = sum(len(after.marked(task_id, key)) for key in keys)
    assert COUNT <= executions <= COUNT + CONCURRENCY  # at most the items in flight, twice
