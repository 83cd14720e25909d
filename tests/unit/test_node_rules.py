"""The node rules are written once: the shared SQL scripts (both SQL stores) write the
checkpoints that ``node_started``, ``node_ended`` and ``node_interrupted`` (the in-memory
store's) compute, on every combination of what they look at."""

import itertools
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from taskloom.engine.errors import LeaseLostError
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import (
    AttemptOutcome,
    ErrorInfo,
    Lease,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    node_ended,
    node_interrupted,
    node_started,
)
from taskloom.engine.states import TaskState
from taskloom.persistence.sql import runs
from taskloom.persistence.sql.dialect import SQLITE, micros
from taskloom.persistence.sql.rows import insert_row, insert_sql
from taskloom.persistence.sql.script import Script, Statement, fused, run_sync
from taskloom.persistence.sqlite import schema

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
BEFORE = NOW - timedelta(minutes=5)
LEASE = Lease(task_id=TaskId("t1"), worker="w1", token="k", expires_at=NOW + timedelta(hours=1))
ERROR = ErrorInfo(error_type="ValueError", message="no", fingerprint="f")

PREVIOUS = (
    None,
    NodeRun(node="n", state=NodeState.RUNNING, attempt=2, failures=1, updated_at=BEFORE),
    NodeRun(
        node="n",
        state=NodeState.RETRYING,
        attempt=2,
        failures=2,
        interruptions=1,
        not_before=NOW,
        error=ERROR,
        updated_at=BEFORE,
    ),
    NodeRun(
        node="n",
        state=NodeState.WAITING,
        attempt=1,
        waiting_for="answer",
        not_before=NOW,
        updated_at=BEFORE,
    ),
    NodeRun(
        node="n",
        state=NodeState.COMPLETED,
        attempt=1,
        failures=1,
        output={"x": 1},
        updated_at=BEFORE,
    ),
)
ENDS = (
    NodeEnd(node="n", attempt=2, outcome=AttemptOutcome.COMPLETED, state=NodeState.COMPLETED),
    NodeEnd(
        node="n",
        attempt=2,
        outcome=AttemptOutcome.FAILED,
        state=NodeState.RETRYING,
        error=ERROR,
        not_before=NOW + timedelta(seconds=3),
    ),
    NodeEnd(node="n", attempt=2, outcome=AttemptOutcome.TIMED_OUT, state=NodeState.FAILED),
    NodeEnd(
        node="n",
        attempt=2,
        outcome=AttemptOutcome.INTERRUPTED,
        state=NodeState.FAILED,
        interruptions=3,
    ),
    NodeEnd(
        node="n",
        attempt=2,
        outcome=AttemptOutcome.WAITING,
        state=NodeState.WAITING,
        waiting_for="timer",
        not_before=NOW + timedelta(hours=1),
    ),
    NodeEnd(node="n", attempt=1, outcome=AttemptOutcome.COMPLETED, state=NodeState.COMPLETED),
)


@contextmanager
def _database(previous: NodeRun | None) -> Iterator[sqlite3.Connection]:
    """A database at the latest schema holding task t1, its lease, and *previous*."""
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as raw:
        for _, text in schema.migrations():
            raw.executescript(text)
        task = Task(
            id=LEASE.task_id,
            name="flow",
            arguments={},
            owner=None,
            state=TaskState.RUNNING,
            created_at=BEFORE,
            updated_at=BEFORE,
            ttl_ms=None,
            version=1,
        )
        raw.execute(insert_sql(SQLITE), insert_row(SQLITE, task))
        raw.execute(
            "INSERT INTO leases VALUES (?, ?, ?, ?)",
            (LEASE.task_id, LEASE.worker, LEASE.token, micros(LEASE.expires_at)),
        )
        if previous is not None:
            raw.execute(
                "INSERT INTO node_runs (task_id, node, state, attempt, failures, interruptions,"
                " not_before, waiting_for, output, error, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    LEASE.task_id,
                    previous.node,
                    previous.state.value,
                    previous.attempt,
                    previous.failures,
                    previous.interruptions,
                    micros(previous.not_before) if previous.not_before else None,
                    previous.waiting_for,
                    json.dumps(previous.output) if previous.output is not None else None,
                    previous.error.model_dump_json() if previous.error else None,
                    micros(previous.updated_at),
                ),
            )
        yield raw


def _run(raw: sqlite3.Connection, script: Script[NodeRun]) -> NodeRun:
    return run_sync(script, raw.execute)


@pytest.mark.parametrize("previous", PREVIOUS)
def test_a_start_writes_what_node_started_computes(previous: NodeRun | None) -> None:
    for attempt, interruptions in itertools.product((1, 3), (0, 2)):
        start = NodeStart(node="n", attempt=attempt, interruptions=interruptions)
        with _database(previous) as raw:
            written = _run(raw, runs.start_node(SQLITE, LEASE, start, micros(NOW)))
        assert written == node_started(previous, start, NOW)


@pytest.mark.parametrize(("previous", "end"), list(itertools.product(PREVIOUS, ENDS)))
def test_an_end_writes_what_node_ended_computes(previous: NodeRun | None, end: NodeEnd) -> None:
    expected = node_ended(previous, end, NOW)
    with _database(previous) as raw:
        if expected is None:
            raw.execute(
                "INSERT INTO node_attempts (task_id, node, attempt, worker, started_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (LEASE.task_id, end.node, end.attempt, LEASE.worker, micros(BEFORE)),
            )
            with pytest.raises(LeaseLostError, match="is not running"):
                _run(raw, runs.end_node(SQLITE, LEASE, end, micros(NOW)))
            # The script itself leaves the attempt open: no rollback needed to undo it.
            (open_attempt,) = raw.execute(
                "SELECT ended_at IS NULL FROM node_attempts WHERE node = ? AND attempt = ?",
                (end.node, end.attempt),
            ).fetchone()
            assert open_attempt == 1
        else:
            assert _run(raw, runs.end_node(SQLITE, LEASE, end, micros(NOW))) == expected


@pytest.mark.parametrize("previous", [run for run in PREVIOUS if run is not None])
def test_a_runs_end_writes_what_node_interrupted_computes(previous: NodeRun) -> None:
    with _database(previous) as raw:
        run_sync(runs.end_run(SQLITE, LEASE, micros(NOW)), raw.execute)
        found = run_sync(runs.node_runs(SQLITE, LEASE.task_id), raw.execute)
    assert found == {"n": node_interrupted(previous, NOW)}


def test_fused_statements_share_one_set_of_parameters() -> None:
    first = Statement("DELETE FROM a WHERE x = %(x)s", {"x": 1})
    last = Statement("UPDATE b SET y = %(y)s WHERE x = %(x)s RETURNING y", {"x": 1, "y": 2})
    together = fused((first, last))
    assert together.text == (
        "WITH s0 AS (DELETE FROM a WHERE x = %(x)s) UPDATE b SET y = %(y)s WHERE x = %(x)s"
        " RETURNING y"
    )
    assert together.parameters == {"x": 1, "y": 2}
    with pytest.raises(ValueError, match="'x' to different values"):
        fused((first, Statement("SELECT %(x)s", {"x": 2})))
