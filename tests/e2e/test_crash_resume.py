"""Worker processes killed with SIGKILL at each commit point, then restarted.

Each test submits ``RUNS`` runs of the ``crash`` workflow (``crash_flow.py``: a seed, four
parallel nodes, a join; each node body appends a completion mark to a file as its last
action), starts a worker process that SIGKILLs itself at one commit point
(``crash_child.py``), reads the database and the marks as the kill left them, starts a
fresh worker process (it takes the dead one's worker slot, so it resumes the runs at
once), and checks the end. What the engine guarantees, and what is asserted for every
run and every node:

- Every run completes, with the result its input determines; everything committed before
  the kill is still there afterwards, and no lease is left behind.
- A node's checkpoint is written exactly once: each node has exactly one completed
  attempt, it is its last, and a node checkpointed as completed before the kill never
  runs again.
- A node body runs to its end at least once, and more than once only in one window: the
  body returned, but the process died before the checkpoint holding its output
  committed. So each completion mark belongs either to the node's completed attempt or
  to an attempt recorded as interrupted, and no attempt left two marks.
- Attempt numbers and the failure and interruption counts continue across the crash; a
  retry wait that the crash cut short is still waited out.
- A question asked before the crash is still pending after it, and the answer, given
  from the test's own process while the restarted worker waits, reaches the re-run node.

Each kill point also checks its victim: a node killed between its body and its
checkpoint completed twice; one killed after its checkpoint, once; and so on. Two more
tests kill the resuming worker too, and kill every worker as one node starts (that node
fails after ``MAX_INTERRUPTIONS`` deaths).
"""

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runner import MAX_INTERRUPTIONS
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.validation import JsonSchemaValidator
from tests.e2e.crash_flow import NODES, QUESTION, crash, expected_result
from tests.helpers import checkout_env, eventually

pytestmark = pytest.mark.slow

RUNS: Final = 6
ROOT: Final = Path(__file__).resolve().parents[2]
CHILD_LIMIT_S: Final = 40.0

Key = tuple[str, str]  # (task id, node)


@dataclass(frozen=True)
class NodeRow:
    state: str
    attempt: int
    failures: int
    interruptions: int
    not_before: int | None
    output: str | None


@dataclass(frozen=True)
class AttemptRow:
    started_at: int
    ended_at: int | None
    outcome: str | None


@dataclass(frozen=True)
class Snapshot:
    """The database and the completion marks at one moment (no worker running)."""

    tasks: dict[str, Task]
    nodes: dict[Key, NodeRow]
    attempts: dict[tuple[str, str, int], AttemptRow]
    leases: int
    marks: Counter[tuple[str, str, int]]

    @classmethod
    def read(cls, database: Path) -> "Snapshot":
        """Read *database* without changing it (a read-only connection never checkpoints)."""
        return cls._read(database, f"file:{database}?mode=ro")

    @classmethod
    def copy(cls, database: Path, scratch: Path) -> "Snapshot":
        """Read a copy of *database* and its WAL, so that the next worker finds the files
        exactly as the kill left them (even the shared-memory index)."""
        scratch.mkdir()
        for suffix in ("", "-wal", "-shm"):
            source = database.with_name(database.name + suffix)
            if source.exists():
                shutil.copyfile(source, scratch / source.name)
        return cls._read(database, str(scratch / database.name))

    @classmethod
    def _read(cls, database: Path, uri: str) -> "Snapshot":
        with closing(sqlite3.connect(uri, uri=True)) as raw:
            tasks = {
                task_id: Task.model_validate_json(body)
                for task_id, body in raw.execute("SELECT id, body FROM tasks")
            }
            nodes = {
                (row[0], row[1]): NodeRow(*row[2:])
                for row in raw.execute(
                    "SELECT task_id, node, state, attempt, failures, interruptions,"
                    " not_before, output FROM node_runs"
                )
            }
            attempts = {
                (row[0], row[1], row[2]): AttemptRow(*row[3:])
                for row in raw.execute(
                    "SELECT task_id, node, attempt, started_at, ended_at, outcome"
                    " FROM node_attempts"
                )
            }
            leases = raw.execute("SELECT count(*) FROM leases").fetchone()[0]
        marks: Counter[tuple[str, str, int]] = Counter()
        marks_file = database.with_name("marks")
        if marks_file.exists():
            for line in marks_file.read_text(encoding="utf-8").splitlines():
                task_id, node, attempt = line.split()
                marks[task_id, node, int(attempt)] += 1
        return cls(tasks, nodes, attempts, leases, marks)

    def history(self, task_id: str, node: str) -> list[tuple[int, str | None]]:
        """The node's attempts, in order, as (number, outcome)."""
        found = [(k[2], a.outcome) for k, a in self.attempts.items() if k[:2] == (task_id, node)]
        return sorted(found)

    def marked(self, task_id: str, node: str) -> list[int]:
        """The attempts of the node whose body completed, once per completion mark."""
        return sorted(k[2] for k in self.marks.elements() if k[:2] == (task_id, node))


@dataclass(frozen=True)
class Victim:
    """Where the killed process says it died (from its ``.kill`` record)."""

    task: str
    node: str
    attempt: int

    @classmethod
    def of(cls, database: Path) -> "Victim":
        lines = database.with_name(database.name + ".kill").read_text().splitlines()
        record = json.loads(lines[-1])  # the latest kill
        return cls(record["task"], record["node"] or "", record["attempt"] or 0)


async def _submit(database: Path, *, ask: bool, flaky: bool, runs: int = RUNS) -> dict[str, int]:
    """Submit the runs (from this test process); their ids and numbers."""
    numbers: dict[str, int] = {}
    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store)
        for number in range(1, runs + 1):
            arguments = {
                "marks": str(database.with_name("marks")),
                "number": number,
                "ask": ask,
                "flaky": flaky,
            }
            numbers[(await submit(manager, crash, arguments)).id] = number
    return numbers


async def _worker(
    database: Path, kill_point: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, "-m", "tests.e2e.crash_child", str(database)]
    if kill_point is not None:
        command.append(kill_point)
    with anyio.fail_after(CHILD_LIMIT_S):
        return await anyio.run_process(command, check=False, cwd=ROOT, env=checkout_env())


def _factor(number: int) -> int:
    return 10 * number


async def _answer_when_asked_again(
    database: Path, numbers: dict[str, int], worker: dict[str, Any]
) -> None:
    """Once every ``confirm`` node waits (parked: no worker re-runs it before its answer,
    ADR 0021) and the restarted worker is up, answer from this process: the answer
    reaches the worker through its polls of the shared file."""

    async def all_waiting() -> bool:
        if "done" in worker:
            raise AssertionError(f"the worker ended before being answered: {worker['done']}")
        nodes = Snapshot.read(database).nodes
        rows = [nodes.get((task_id, "confirm")) for task_id in numbers]
        return all(row is not None and row.state == "waiting" for row in rows)

    await eventually(all_waiting, within_s=20, every_s=0.05)
    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store, validator=JsonSchemaValidator())
        for task_id, number in numbers.items():
            await manager.provide_input(task_id, QUESTION, {"factor": _factor(number)})


async def _restart(database: Path, numbers: dict[str, int], *, answer: bool) -> None:
    worker: dict[str, Any] = {}

    async def serve() -> None:
        worker["done"] = await _worker(database)

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(serve)
        if answer:
            await _answer_when_asked_again(database, numbers, worker)
    done = worker["done"]
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["terminal"]


# -- what must hold after every crash -----------------------------------------------------


def _check_end(before: Snapshot, after: Snapshot, numbers: dict[str, int], *, ask: bool) -> None:
    assert set(after.tasks) == set(numbers)
    assert after.leases == 0
    for task_id, number in numbers.items():
        task = after.tasks[task_id]
        assert task.state is TaskState.COMPLETED, task.error
        assert task.result == expected_result(number, _factor(number) if ask else 1)
        for node in NODES:
            _check_node(after, task_id, node)
    _check_nothing_lost(before, after)
    assert max(after.marks.values()) == 1, "an attempt's body completed twice"


def _check_node(after: Snapshot, task_id: str, node: str) -> None:
    history = after.history(task_id, node)
    numbers = [number for number, _ in history]
    outcomes = [outcome for _, outcome in history]
    assert numbers == list(range(1, len(history) + 1))
    assert outcomes[-1] == "completed"
    assert set(outcomes[:-1]) <= {"failed", "interrupted", "waiting"}
    row = after.nodes[task_id, node]
    assert (row.state, row.attempt) == ("completed", len(history))
    assert row.failures == outcomes.count("failed")
    assert row.interruptions == outcomes.count("interrupted")
    completed = len(history)
    assert completed in after.marked(task_id, node)
    for attempt in after.marked(task_id, node):
        assert attempt == completed or outcomes[attempt - 1] == "interrupted"


def _check_nothing_lost(before: Snapshot, after: Snapshot) -> None:
    assert set(before.tasks) <= set(after.tasks)
    for node, row in before.nodes.items():
        if row.state == "completed":
            assert after.nodes[node] == row  # never ran again, output kept
    for key, attempt in before.attempts.items():
        if attempt.ended_at is not None:
            assert after.attempts[key] == attempt
        else:
            assert after.attempts[key].outcome == "interrupted"
    for mark, count in before.marks.items():
        assert after.marks[mark] == count


# -- what must hold for each kill point's victim ------------------------------------------


def _after_claim(database: Path, before: Snapshot, after: Snapshot) -> None:
    assert {task.state for task in before.tasks.values()} == {TaskState.RUNNING}
    assert before.leases == RUNS
    assert not before.nodes
    assert all(after.marked(task_id, node) == [1] for task_id in after.tasks for node in NODES)


def _before_start(database: Path, before: Snapshot, after: Snapshot) -> None:
    victim = Victim.of(database)
    assert (victim.task, victim.node, victim.attempt) not in before.attempts
    row = before.nodes.get((victim.task, victim.node))
    assert (row.attempt if row is not None else 0) == victim.attempt - 1
    assert after.history(victim.task, victim.node)[-1] == (victim.attempt, "completed")
    assert after.marked(victim.task, victim.node) == [victim.attempt]


def _after_start(database: Path, before: Snapshot, after: Snapshot) -> None:
    victim = Victim.of(database)
    row = before.nodes[victim.task, victim.node]
    assert (row.state, row.attempt) == ("running", victim.attempt)
    assert before.marked(victim.task, victim.node) == []
    assert after.history(victim.task, victim.node)[-2:] == [
        (victim.attempt, "interrupted"),
        (victim.attempt + 1, "completed"),
    ]
    assert after.marked(victim.task, victim.node) == [victim.attempt + 1]


def _before_end(database: Path, before: Snapshot, after: Snapshot) -> None:
    victim = Victim.of(database)
    row = before.nodes[victim.task, victim.node]
    assert (row.state, row.attempt, row.output) == ("running", victim.attempt, None)
    assert before.marked(victim.task, victim.node) == [victim.attempt]
    assert after.history(victim.task, victim.node)[-2:] == [
        (victim.attempt, "interrupted"),
        (victim.attempt + 1, "completed"),
    ]
    # The at-least-once window: the body had completed, its checkpoint had not.
    assert after.marked(victim.task, victim.node) == [victim.attempt, victim.attempt + 1]


def _after_end(database: Path, before: Snapshot, after: Snapshot) -> None:
    victim = Victim.of(database)
    row = before.nodes[victim.task, victim.node]
    assert (row.state, row.attempt) == ("completed", victim.attempt)
    assert row.output is not None
    assert after.nodes[victim.task, victim.node] == row
    assert after.marked(victim.task, victim.node) == [victim.attempt]


def _backoff(database: Path, before: Snapshot, after: Snapshot) -> None:
    waiting = {key: row for key, row in before.nodes.items() if row.state == "retrying"}
    assert waiting, "no retry wait was cut short"
    for (task_id, node), row in waiting.items():
        assert (node, row.attempt, row.failures) == ("flaky", 1, 1)
        assert row.not_before is not None
        assert after.history(task_id, node) == [(1, "failed"), (2, "completed")]
        assert after.nodes[task_id, node].failures == 1
        assert after.attempts[task_id, node, 2].started_at >= row.not_before
        assert after.marked(task_id, node) == [2]


def _waiting_for_input(database: Path, before: Snapshot, after: Snapshot) -> None:
    for task_id, task in before.tasks.items():
        number = task.arguments["number"]
        assert isinstance(number, int)
        assert task.state is TaskState.INPUT_REQUIRED
        assert task.input_requests[QUESTION].message == f"Factor for run {number}?"
        assert before.nodes[task_id, "confirm"].state == "waiting"
        final = after.tasks[task_id]
        assert final.input_requests == {}
        assert final.input_responses == {QUESTION: {"factor": _factor(number)}}
        assert after.history(task_id, "confirm") == [(1, "waiting"), (2, "completed")]
        assert after.nodes[task_id, "confirm"].interruptions == 0
        assert after.marked(task_id, "confirm") == [2]


def _before_finish(database: Path, before: Snapshot, after: Snapshot) -> None:
    """Killed as the run's last node end and its result were about to commit together:
    the node runs again (the at-least-once window), nothing else does."""
    victim = Victim.of(database)
    assert victim.node == "join"
    assert before.tasks[victim.task].state is TaskState.RUNNING
    _before_end(database, before, after)
    for node in NODES[:-1]:
        assert before.nodes[victim.task, node].state == "completed"
        assert after.history(victim.task, node) == [(1, "completed")]
        assert after.marked(victim.task, node) == [1]


def _after_finish(database: Path, before: Snapshot, after: Snapshot) -> None:
    """Killed right after the last node end and the result committed together: the run was
    over, so the restarted worker leaves it alone."""
    victim = Victim.of(database)
    assert victim.node == "join"
    task = before.tasks[victim.task]
    assert task.state is TaskState.COMPLETED
    assert after.tasks[victim.task] == task
    for node in NODES:
        assert before.nodes[victim.task, node].state == "completed"
        assert after.history(victim.task, node) == [(1, "completed")]
        assert after.marked(victim.task, node) == [1]


Check = Callable[[Path, Snapshot, Snapshot], None]
KILL_POINTS: Final[dict[str, Check]] = {
    "after_claim": _after_claim,
    "before_start:1": _before_start,
    "before_start:9": _before_start,
    "after_start:9": _after_start,
    "before_end:8": _before_end,
    "after_end:8": _after_end,
    "backoff": _backoff,
    "input": _waiting_for_input,
    "before_finish:2": _before_finish,
    "after_finish:2": _after_finish,
}


async def _crash(database: Path, kill_point: str, scratch: Path) -> Snapshot:
    """Run a worker that kills itself at *kill_point*; the files as it left them."""
    killed = await _worker(database, kill_point)
    assert killed.returncode == -signal.SIGKILL, (
        f"the worker exited with {killed.returncode} instead of being killed at {kill_point}: "
        + killed.stderr.decode()
    )
    return Snapshot.copy(database, scratch)


@pytest.mark.parametrize("kill_point", KILL_POINTS)
async def test_every_run_completes_after_a_sigkill_at(kill_point: str, tmp_path: Path) -> None:
    database = tmp_path / "crash.db"
    ask, flaky = kill_point == "input", kill_point == "backoff"
    numbers = await _submit(database, ask=ask, flaky=flaky)

    before = await _crash(database, kill_point, tmp_path / "killed")
    await _restart(database, numbers, answer=ask)
    after = Snapshot.read(database)

    _check_end(before, after, numbers, ask=ask)
    KILL_POINTS[kill_point](database, before, after)


async def test_a_crash_while_resuming_from_a_crash_loses_nothing(tmp_path: Path) -> None:
    database = tmp_path / "crash.db"
    numbers = await _submit(database, ask=False, flaky=False)

    first = await _crash(database, "after_start:9", tmp_path / "first")
    second = await _crash(database, "after_start:2", tmp_path / "second")
    _check_nothing_lost(first, second)
    await _restart(database, numbers, answer=False)
    after = Snapshot.read(database)

    _check_end(second, after, numbers, ask=False)
    assert sum(row.interruptions for row in after.nodes.values()) >= 2


async def test_a_node_whose_worker_is_killed_every_time_fails_the_run(tmp_path: Path) -> None:
    """A poison pill: every worker dies as ``flaky`` starts. After MAX_INTERRUPTIONS deaths
    the node fails (``WorkerLost``) instead of killing workers for ever."""
    database = tmp_path / "crash.db"
    numbers = await _submit(database, ask=False, flaky=False, runs=1)
    (task_id,) = numbers
    for kill in range(MAX_INTERRUPTIONS):
        await _crash(database, "after_start@flaky", tmp_path / f"kill-{kill}")
    await _restart(database, numbers, answer=False)
    after = Snapshot.read(database)

    task = after.tasks[task_id]
    assert task.state is TaskState.FAILED
    assert task.error is not None
    assert task.error.error_type == "WorkerLost"
    assert after.leases == 0
    interrupted = [(attempt, "interrupted") for attempt in range(1, MAX_INTERRUPTIONS + 1)]
    assert after.history(task_id, "flaky") == interrupted
    assert after.nodes[task_id, "flaky"].state == "failed"
    assert after.marked(task_id, "flaky") == []
    assert after.marked(task_id, "join") == []


async def test_a_question_survives_more_sigkills_than_the_interruption_limit(
    tmp_path: Path,
) -> None:
    """Workers are killed with SIGKILL while every run's question waits, more times than
    ``MAX_INTERRUPTIONS``: a waiting node is not running, so no death counts against it;
    the questions are answered from this process and every run completes."""
    database = tmp_path / "crash.db"
    numbers = await _submit(database, ask=True, flaky=False)
    for kill in range(MAX_INTERRUPTIONS + 2):
        await _crash(database, "input", tmp_path / f"kill-{kill}")
    await _restart(database, numbers, answer=True)
    after = Snapshot.read(database)

    assert after.leases == 0
    for task_id, number in numbers.items():
        task = after.tasks[task_id]
        assert task.state is TaskState.COMPLETED, task.error
        assert task.input_responses == {QUESTION: {"factor": _factor(number)}}
        assert after.nodes[task_id, "confirm"].interruptions == 0
        assert after.history(task_id, "confirm") == [(1, "waiting"), (2, "completed")]
