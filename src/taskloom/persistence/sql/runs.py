"""The run rules (node checkpoints, attempts, fork, failed attempts) for both SQL stores.

Each writing function is a script (see :mod:`.script`). The node rules are those of
:mod:`taskloom.engine.runs` (``node_started``, ``node_ended``, ``node_interrupted``), which the
in-memory store applies directly; the contract suite holds the three stores together.
"""

import json
from functools import cache
from typing import Any

from taskloom.engine.errors import LeaseLostError, TaskNotFoundError, TaskStateError
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import (
    FAILURE_OUTCOMES,
    FailureQuery,
    Lease,
    NodeAttempt,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
)
from taskloom.engine.states import TERMINAL_STATES, TaskState
from taskloom.persistence.sql import history, rows
from taskloom.persistence.sql.dialect import Dialect, is_in
from taskloom.persistence.sql.fence import Fence, Guard, fenced
from taskloom.persistence.sql.script import Script, Statement, ask


def _lease_lost(lease: Lease) -> LeaseLostError:
    return LeaseLostError(f"the lease of worker {lease.worker} on task {lease.task_id} is gone")


def check_fence(d: Dialect, lease: Lease) -> Script[None]:
    """Raise :class:`LeaseLostError` unless *lease* is still the task's lease. Where rows
    are locked, the lease row stays share-locked until the transaction ends, so no claim
    can take the run over between this check and the fenced write."""
    found = yield Statement(_fence_sql(d), {"task": lease.task_id})
    row = found.one()
    if row is None or row[0] != lease.token:
        raise _lease_lost(lease)


@cache
def _fence_sql(d: Dialect) -> str:
    return f"SELECT token FROM leases WHERE task_id = {d.parameter('task')}{d.shared()}"


def _release(d: Dialect, lease: Lease) -> Statement:
    return Statement(_release_sql(d), {"task": lease.task_id, "token": lease.token})


@cache
def _release_sql(d: Dialect) -> str:
    p = d.parameter
    return f"DELETE FROM leases WHERE task_id = {p('task')} AND token = {p('token')}"


def release_lease(d: Dialect, lease: Lease) -> Script[None]:
    """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
    yield _release(d, lease)


def end_run(d: Dialect, lease: Lease, now: object) -> Script[None]:
    """Drop *lease* and end the attempts its run leaves open as it ends (see
    ``RunStore``): interrupted, their nodes ``retrying`` with one more interruption
    (``engine.runs.node_interrupted``). One round trip where the dialect fuses writes."""
    parameters = {"now": now, "task": lease.task_id, "token": lease.token}
    attempts_sql, nodes_sql = _end_run_sql(d)
    yield (
        _release(d, lease),
        Statement(attempts_sql, parameters),
        Statement(nodes_sql, parameters),
    )


@cache
def _end_run_sql(d: Dialect) -> tuple[str, str]:
    """The updates of :func:`end_run` after the lease's release."""
    p = d.parameter
    attempts = (
        f"UPDATE node_attempts SET ended_at = {p('now')}, outcome = 'interrupted'"
        f" WHERE task_id = {p('task')} AND ended_at IS NULL"
    )
    nodes = (
        "UPDATE node_runs SET state = 'retrying', interruptions = interruptions + 1,"
        f" updated_at = {p('now')} WHERE task_id = {p('task')} AND state = 'running'"
    )
    return attempts, nodes


def start_node(d: Dialect, lease: Lease, start: NodeStart, now: object) -> Script[NodeRun]:
    """See :meth:`taskloom.engine.runs.RunStore.start_node` (``engine.runs.node_started``).

    Behind the fence and the task's state (:mod:`.fence`): one round trip where the
    dialect folds the fence, two where it only fuses writes. The texts are built once per
    dialect (every node's start runs this); the close of an interrupted attempt only when
    the start names one."""
    fence, live = start_fence(d)
    parameters: dict[str, object] = {
        "task": lease.task_id,
        "token": lease.token,
        "node": start.node,
        "attempt": start.attempt,
        "interruptions": start.interruptions,
        "interrupted": start.interrupted_attempt,
        "worker": lease.worker,
        "now": now,
        "e": live,
    }
    closes = start.interrupted_attempt is not None

    def check(row: tuple[Any, ...] | None) -> None:
        check_start(lease, row)

    def writes(guard: Guard) -> tuple[Statement, ...]:
        close, attempt, run = start_writes(d, guard.condition)
        opened = (Statement(attempt, parameters), Statement(run, parameters))
        return (Statement(close, parameters), *opened) if closes else opened

    written = yield from fenced(d, fence, check, writes, parameters)
    return rows.node_run(d, written.rows[0])  # an upsert always returns its row


def check_start(lease: Lease, row: tuple[Any, ...] | None) -> None:
    """Raise unless the fence row of a node's start (:func:`start_fence`) lets it start."""
    if row is None or row[0] != lease.token:
        raise _lease_lost(lease)
    if TaskState(row[1]) in TERMINAL_STATES:
        raise TaskStateError(f"task {lease.task_id} has ended; no node may start")


def check_end(lease: Lease, row: tuple[Any, ...] | None) -> None:
    """Raise unless the fence row of a node's end (:func:`end_fence`) lets it land."""
    if row is None or row[0] != lease.token:
        raise _lease_lost(lease)


def not_running(lease: Lease, node: str) -> LeaseLostError:
    """The refusal of an end whose node is not running that attempt."""
    return LeaseLostError(f"node {node!r} of task {lease.task_id} is not running")


@cache
def start_fence(d: Dialect) -> tuple[Fence, object]:
    """The fence of a node's start, and the value of its parameter ``e`` (the terminal
    states)."""
    p = d.parameter
    bound: dict[str, object] = {}
    live = "NOT " + is_in(d, "state", "e", sorted(state.value for state in TERMINAL_STATES), bound)
    fence = Fence(
        columns=("l.token", "t.state"),
        source="leases l JOIN tasks t ON t.id = l.task_id"
        f" WHERE l.task_id = {p('task')}{d.shared('l')}",
        allows=f"token = {p('token')} AND {live}",
    )
    return fence, bound["e"]


@cache
def start_writes(d: Dialect, condition: str) -> tuple[str, str, str]:
    """The writes of a node's start under the guard *condition*: the close of an
    interrupted attempt, the new attempt, the checkpoint."""
    p, guard = d.parameter, Guard(condition)
    close = (
        f"UPDATE node_attempts SET ended_at = {p('now')}, outcome = 'interrupted'"
        + guard.where(
            f" WHERE task_id = {p('task')} AND node = {p('node')}"
            f" AND attempt = {p('interrupted')} AND ended_at IS NULL"
        )
    )
    attempt = "INSERT INTO node_attempts (task_id, node, attempt, worker, started_at) " + (
        guard.values(p("task"), p("node"), p("attempt"), p("worker"), p("now"))
    )
    run = (
        "INSERT INTO node_runs (task_id, node, state, attempt, interruptions, updated_at) "
        + guard.values(
            p("task"), p("node"), "'running'", p("attempt"), p("interruptions"), p("now")
        )
        + RESTARTED
    )
    return close, attempt, run


RESTARTED = (
    " ON CONFLICT (task_id, node) DO UPDATE SET state = 'running',"
    " attempt = excluded.attempt, interruptions = excluded.interruptions,"
    " not_before = NULL, waiting_for = NULL, updated_at = excluded.updated_at"
    f" RETURNING {rows.NODE_COLUMNS}"
)
"""The end of a node start's checkpoint insert: a checkpoint already there (a node run
again) is set running, and the row is returned."""


def end_node(d: Dialect, lease: Lease, end: NodeEnd, now: object) -> Script[NodeRun]:
    """See :meth:`taskloom.engine.runs.RunStore.end_node` (``engine.runs.node_ended``).

    Behind the fence (:mod:`.fence`), the attempt's end and the checkpoint: one round
    trip where the dialect folds the fence, two where it only fuses writes. A node not
    running this attempt raises, undoing both. The texts are built once per dialect."""
    parameters = end_parameters(d, lease, end, now)

    def check(row: tuple[Any, ...] | None) -> None:
        check_end(lease, row)

    def writes(guard: Guard) -> tuple[Statement, ...]:
        return tuple(Statement(text, parameters) for text in end_writes(d, guard.condition))

    ended = yield from fenced(d, end_fence(d), check, writes, parameters)
    row = ended.one()
    if row is None:
        raise not_running(lease, end.node)
    return rows.node_run(d, row)


def end_parameters(d: Dialect, lease: Lease, end: NodeEnd, now: object) -> dict[str, object]:
    """What the writes of a node's end bind."""
    return {
        "state": end.state.value,
        "failed": int(end.outcome in FAILURE_OUTCOMES),
        "output": json.dumps(end.output) if end.state is NodeState.COMPLETED else None,
        "error": end.error.model_dump_json() if end.error is not None else None,
        "not_before": d.stored(end.not_before),
        "waiting_for": end.waiting_for,
        "interruptions": end.interruptions,
        "now": now,
        "task": lease.task_id,
        "token": lease.token,
        "node": end.node,
        "attempt": end.attempt,
        "outcome": end.outcome.value,
    }


@cache
def end_fence(d: Dialect) -> Fence:
    p = d.parameter
    return Fence(
        columns=("token",),
        source=f"leases WHERE task_id = {p('task')}{d.shared()}",
        allows=f"token = {p('token')}",
    )


@cache
def end_writes(d: Dialect, condition: str = "") -> tuple[str, str]:
    """The writes of a node's end under the guard *condition*: the attempt, the checkpoint."""
    p, guard = d.parameter, Guard(condition)
    this_attempt = (
        f" WHERE task_id = {p('task')} AND node = {p('node')} AND attempt = {p('attempt')}"
    )
    attempt = (
        f"UPDATE node_attempts SET ended_at = {p('now')}, outcome = {p('outcome')},"
        f" error = {p('error')}"
        + guard.where(
            f"{this_attempt} AND EXISTS (SELECT 1 FROM node_runs{this_attempt}"
            " AND state = 'running')"
        )
    )
    run = (
        f"UPDATE node_runs SET state = {p('state')}, failures = failures + {p('failed')},"
        f" output = {p('output')}, error = {p('error')}, not_before = {p('not_before')},"
        f" waiting_for = {p('waiting_for')},"
        f" interruptions = coalesce({p('interruptions')}, interruptions),"
        f" updated_at = {p('now')}"
        + guard.where(f"{this_attempt} AND state = 'running'")
        + f" RETURNING {rows.NODE_COLUMNS}"
    )
    return attempt, run


def fork_run(
    d: Dialect, task: Task, *, source: TaskId, nodes: frozenset[str], now: object
) -> Script[dict[str, NodeRun]]:
    """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
    p = d.parameter
    found = yield from ask(
        Statement(
            f"SELECT 1 FROM tasks WHERE id = {p('source')} AND {rows.live(d)}",
            {"source": source, "now": now},
        )
    )
    if found.one() is None:
        raise TaskNotFoundError(source)
    yield Statement(rows.insert_sql(d), rows.insert_row(d, task))
    yield from history.record(d, None, task)
    if nodes:
        parameters: dict[str, object] = {"task": task.id, "source": source}
        names = is_in(d, "node", "n", sorted(nodes), parameters)
        yield Statement(
            "INSERT INTO node_runs (task_id, node, state, attempt, failures, interruptions,"
            " not_before, output, error, updated_at)"
            f" SELECT {p('task')}, node, state, attempt, failures, interruptions, NULL, output,"
            f" error, updated_at FROM node_runs WHERE task_id = {p('source')}"
            f" AND state = 'completed' AND {names}",
            parameters,
        )
    return (yield from node_runs(d, task.id))


def node_runs(d: Dialect, task_id: str) -> Script[dict[str, NodeRun]]:
    """The checkpoints of a run, by node name."""
    found = yield Statement(_node_runs_sql(d), {"task": task_id})
    return {run.node: run for run in (rows.node_run(d, row) for row in found.rows)}


@cache
def _node_runs_sql(d: Dialect) -> str:
    return f"SELECT {rows.NODE_COLUMNS} FROM node_runs WHERE task_id = {d.parameter('task')}"


def attempts(d: Dialect, task_id: TaskId) -> Script[list[NodeAttempt]]:
    """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
    found = yield from ask(
        Statement(
            f"SELECT {rows.ATTEMPT_COLUMNS} FROM node_attempts WHERE task_id = {d.parameter('task')}"
            " ORDER BY started_at, node, attempt",
            {"task": task_id},
        )
    )
    return [rows.node_attempt(d, row) for row in found.rows]


def failed_attempts(d: Dialect, query: FailureQuery, now: object) -> Script[list[NodeAttempt]]:
    """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
    parameters: dict[str, object] = {"now": now, "limit": query.limit}
    outcomes = is_in(
        d, "a.outcome", "o", sorted(outcome.value for outcome in FAILURE_OUTCOMES), parameters
    )
    where = [outcomes, "a.ended_at IS NOT NULL", rows.live(d, "t")]
    if query.match_owner:
        where.append(rows.owned(d, query.owner, parameters, "t"))
    columns = ", ".join(f"a.{column}" for column in rows.ATTEMPT_COLUMNS.split(", "))
    found = yield from ask(
        Statement(
            f"SELECT {columns} FROM node_attempts a JOIN tasks t ON t.id = a.task_id"
            f" WHERE {' AND '.join(where)} ORDER BY a.ended_at DESC, a.task_id DESC,"
            f" a.node DESC, a.attempt DESC LIMIT {d.parameter('limit')}",
            parameters,
        )
    )
    return [rows.node_attempt(d, row) for row in found.rows]
