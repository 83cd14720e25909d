"""Two servers and three worker processes on one PostgreSQL schema run 500 workflow runs
while a worker is killed with SIGKILL every one to two seconds and restarted.

The servers (``pg_chaos_child server``: engines without workers) submit the runs with
idempotency keys, the ranges overlapping by ``OVERLAP`` keys that both submit, then wait
for each run to end, woken by LISTEN/NOTIFY. Each run is the ``chaos`` diamond
(``pg_chaos_flow``: four nodes, each leaving a completion mark as its last action). What
is asserted, from the database and the marks once the servers are done:

- No task is lost or duplicated: exactly one task per key, the one both servers saw.
- Every run ends, and completes with the result its input determines; the only other
  end allowed is the engine's poison-pill rule (a node whose worker died
  ``MAX_INTERRUPTIONS`` times fails the run with ``WorkerLost``), which the kill rate
  makes rare; no lease is left behind, and no attempt is left open.
- Every node's checkpoint was written exactly once: its attempts are numbered 1..n, the
  last completed, every earlier one interrupted (nodes here never fail), and the
  checkpoint's counts agree. In a run that failed, the nodes that did not complete were
  given up (``MAX_INTERRUPTIONS`` interrupted attempts), cancelled by that failure (the
  last attempt ``cancelled``), or closed by it (every attempt interrupted, the node
  ``retrying``).
- A node body ran to its end at least once and more than once only in the at-least-once
  window: the body returned, but its worker died (or lost its lease) before the
  checkpoint holding its output committed. So each mark belongs either to the node's
  completed attempt or to an attempt recorded as interrupted, and no attempt left two
  marks. Whether a kill lands in that window is left to chance (some runs have none):
  ``test_postgres_at_least_once`` puts a worker there on purpose.
- The chaos was real: the planned kills happened and some runs changed workers midway.
"""

import json
import random
import signal
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import anyio
import psycopg
import pytest
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from psycopg import sql

from taskloom.engine.models import Task
from taskloom.engine.runner import MAX_INTERRUPTIONS
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from tests import postgres
from tests.helpers import checkout_env
from tests.integration.pg_chaos_flow import NODES, expected_result

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[2]
RUNS: Final = 500
OVERLAP: Final = 50
"""Keys both servers submit (the ranges ``[0, 275)`` and ``[225, 500)``)."""
WORKERS: Final = 3
KILLS: Final = 10
"""SIGKILLs, one every 1 to 2 s from when the servers start."""
LEASE_S: Final = 2.0
START_LIMIT_S: Final = 30.0

Key = tuple[str, str]  # (task id, node)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    postgres.require_server()
    name = postgres.new_schema_name()
    settings = PostgresSettings(url=postgres.TEST_URL, schema_name=name)
    async with PostgresTaskStore.open(settings):
        pass  # migrate once, before five processes race to
    yield name
    await postgres.drop_schema(name)


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.integration.pg_chaos_child", *args]


def _env() -> dict[str, str]:
    return checkout_env()


@dataclass
class Fleet:
    """The worker processes: started, killed and restarted by the test."""

    schema: str
    logs: Path
    processes: dict[int, Process] = field(default_factory=dict)
    ready: set[int] = field(default_factory=set)
    kills: int = 0
    _log_files: list[IO[bytes]] = field(default_factory=list)

    async def start(self, slot: int) -> None:
        log = (self.logs / f"worker-{slot}-{len(self._log_files)}.log").open("wb")
        self._log_files.append(log)
        process = await anyio.open_process(
            _command("worker", postgres.TEST_URL, self.schema, str(LEASE_S)),
            cwd=ROOT,
            env=_env(),
            stderr=log,
        )
        self.processes[slot] = process
        assert process.stdout is not None
        with anyio.fail_after(START_LIMIT_S):
            async for line in TextReceiveStream(process.stdout):
                if "ready" in line:
                    break
        self.ready.add(slot)

    async def kill_and_restart(self, slot: int) -> None:
        self.ready.discard(slot)
        victim = self.processes[slot]
        victim.send_signal(signal.SIGKILL)
        self.kills += 1
        with anyio.fail_after(10):
            await victim.wait()
        assert victim.returncode == -signal.SIGKILL
        await victim.aclose()
        await self.start(slot)

    async def stop(self) -> list[int]:
        """Kill the workers; the slots of those that had exited on their own."""
        exited = [
            slot for slot, process in self.processes.items() if process.returncode is not None
        ]
        with anyio.CancelScope(shield=True):
            for process in self.processes.values():
                if process.returncode is None:
                    process.send_signal(signal.SIGKILL)
                with anyio.fail_after(10):
                    await process.wait()
                await process.aclose()
            for log in self._log_files:
                log.close()
        return exited


async def _chaos(fleet: Fleet) -> None:
    """Every 1 to 2 s, SIGKILL a random worker that is up, and start it again meanwhile;
    KILLS times."""
    rng = random.Random(7)
    planned = KILLS
    async with anyio.create_task_group() as restarts:
        while planned > 0:
            await anyio.sleep(rng.uniform(1.0, 2.0))  # the chaos's pace, not synchronisation
            if fleet.ready:
                slot = rng.choice(sorted(fleet.ready))
                fleet.ready.discard(slot)
                restarts.start_soon(fleet.kill_and_restart, slot)
                planned -= 1


async def _server(schema: str, marks: Path, first: int, stop: int) -> dict[int, list[Any]]:
    command = _command("server", postgres.TEST_URL, schema, str(marks), str(first), str(stop))
    ran = await anyio.run_process(command, check=False, cwd=ROOT, env=_env())
    assert ran.returncode == 0, ran.stderr.decode()
    return {int(number): ended for number, ended in json.loads(ran.stdout).items()}


@dataclass(frozen=True)
class Store:
    """What the database holds once the servers are done."""

    tasks: dict[str, Task]
    keys: list[str | None]
    nodes: dict[Key, tuple[str, int, int, int]]  # state, attempt, failures, interruptions
    attempts: dict[Key, list[tuple[int, str | None, str]]]  # attempt, outcome, worker
    leases: int

    @classmethod
    def read(cls, schema: str) -> "Store":
        def query(text: str) -> list[tuple[Any, ...]]:
            return connection.execute(sql.SQL(text).format(sql.Identifier(schema))).fetchall()

        with psycopg.connect(postgres.TEST_URL) as connection:
            found = query("SELECT id, idempotency_key, body::text FROM {}.tasks")
            nodes = query(
                "SELECT task_id, node, state, attempt, failures, interruptions FROM {}.node_runs"
            )
            attempts: dict[Key, list[tuple[int, str | None, str]]] = defaultdict(list)
            for task_id, node, *attempt in query(
                "SELECT task_id, node, attempt, outcome, worker FROM {}.node_attempts"
                " ORDER BY task_id, node, attempt"
            ):
                attempts[task_id, node].append((attempt[0], attempt[1], attempt[2]))
            (leases,) = query("SELECT count(*) FROM {}.leases")[0]
        return cls(
            tasks={row[0]: Task.model_validate_json(row[2]) for row in found},
            keys=[row[1] for row in found],
            nodes={(row[0], row[1]): (row[2], row[3], row[4], row[5]) for row in nodes},
            attempts=dict(attempts),
            leases=leases,
        )


def _marks(path: Path) -> Counter[tuple[str, str, int]]:
    marks: Counter[tuple[str, str, int]] = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        task_id, node, attempt = line.split()
        marks[task_id, node, int(attempt)] += 1
    return marks


def _check_node(store: Store, marks: Counter[tuple[str, str, int]], key: Key) -> str:
    """How the node ended: "completed", "given up" (the poison-pill rule), or, in a run
    that failed, "cancelled" or "closed"; after checking its history and marks."""
    history = store.attempts[key]
    numbers = [attempt for attempt, _, _ in history]
    outcomes = [outcome for _, outcome, _ in history]
    assert numbers == list(range(1, len(history) + 1)), key
    assert None not in outcomes, f"{key}: an attempt was left open: {outcomes}"
    state, attempt, failures, interruptions = store.nodes[key]
    assert (attempt, failures) == (len(history), 0), key
    marked = {number for (task_id, node, number) in marks if (task_id, node) == key}
    earlier = ["interrupted"] * (len(history) - 1)
    if state == "completed":
        end = "completed"
        assert outcomes == [*earlier, "completed"], key
        assert interruptions == len(history) - 1, key
        assert len(history) in marked, f"{key}: its completed attempt left no mark"
    elif state == "retrying":  # running when the run failed: closed by that write
        end = "closed"
        assert outcomes == [*earlier, "interrupted"], key
        assert interruptions == len(history), key
    elif outcomes[-1] == "cancelled":  # stopped by its run's failure
        end = "cancelled"
        assert (state, outcomes) == ("failed", [*earlier, "cancelled"]), key
        assert interruptions == len(history) - 1, key
    else:  # the poison-pill rule, the only way a node here can fail
        end = "given up"
        assert state == "failed", key
        assert outcomes == ["interrupted"] * MAX_INTERRUPTIONS, key
        assert interruptions == MAX_INTERRUPTIONS, key
    for number in marked:  # the completed attempt, or one whose checkpoint was lost
        outcome = outcomes[number - 1]
        assert outcome in {"completed", "interrupted"}, f"{key}: attempt {number} is {outcome}"
    return end


async def test_500_runs_survive_workers_killed_every_few_seconds(
    schema: str, tmp_path: Path
) -> None:
    marks_file = tmp_path / "marks"
    fleet = Fleet(schema, tmp_path)
    seen: list[dict[int, list[Any]]] = []

    async def server(first: int, stop: int) -> None:
        seen.append(await _server(schema, marks_file, first, stop))

    try:
        for slot in range(WORKERS):
            await fleet.start(slot)
        async with anyio.create_task_group() as task_group:
            half = (RUNS + OVERLAP) // 2
            task_group.start_soon(server, 0, half)
            task_group.start_soon(server, RUNS - half, RUNS)
            task_group.start_soon(_chaos, fleet)
    finally:
        exited = await fleet.stop()
    assert exited == [], f"workers in slots {exited} died on their own; see {tmp_path}"

    # No task lost or duplicated: one per key, and both servers saw the same one.
    ids: dict[int, str] = {}
    for answers in seen:
        for number, (task_id, _state, _result) in answers.items():
            assert ids.setdefault(number, task_id) == task_id, f"run {number} has two tasks"
    assert sorted(ids) == list(range(RUNS))
    store = Store.read(schema)
    assert sorted(store.tasks) == sorted(ids.values())
    assert sorted(map(str, store.keys)) == sorted(f"run-{number}" for number in range(RUNS))
    assert store.leases == 0

    # Every run ended, as both the store and the servers (through NOTIFY) saw it.
    marks = _marks(marks_file)
    assert max(marks.values()) == 1, "an attempt's body completed twice"
    assert {(task_id, node) for task_id, node, _ in marks} <= set(store.nodes)
    ends: Counter[TaskState] = Counter()
    for number, task_id in ids.items():
        task = store.tasks[task_id]
        for answers in seen:
            if number in answers:
                assert answers[number][1:] == [task.state.value, task.result]
        node_ends = [
            _check_node(store, marks, (task_id, node))
            for node in NODES
            if (task_id, node) in store.nodes
        ]
        if task.state is TaskState.COMPLETED:
            assert task.result == expected_result(task.arguments["number"])  # type: ignore[arg-type]
            assert node_ends == ["completed"] * len(NODES)
        else:
            assert task.state is TaskState.FAILED, task
            assert task.error is not None
            assert task.error.error_type == "WorkerLost"
            assert "given up" in node_ends, node_ends
        ends[task.state] += 1

    # The chaos was real: every planned kill, and runs that changed workers midway.
    assert fleet.kills == KILLS
    moved = {
        task_id
        for task_id in ids.values()
        if len({worker for node in NODES for *_, worker in store.attempts.get((task_id, node), [])})
        > 1
    }
    assert moved
    interrupted = sum(row[3] for row in store.nodes.values())
    twice = sum(1 for (task_id, node, n) in marks if n < store.nodes[task_id, node][1])
    print(
        f"ends {dict(ends)}, {len(moved)} runs moved, {interrupted} attempts interrupted, "
        f"{twice} of them after their body's end"
    )
