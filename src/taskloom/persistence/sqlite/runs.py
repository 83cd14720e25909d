"""Run transactions of the SQLite store (leases, node checkpoints, attempts).

Each function runs in the writer's (or reader's) thread inside one transaction.
"""

import json
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from pydantic import JsonValue

from taskloom.engine.claims import ClaimRule, new_token, take
from taskloom.engine.errors import LeaseLostError, TaskNotFoundError, TaskStateError
from taskloom.engine.models import Task, TaskId, TaskMutation
from taskloom.engine.runs import (
    FAILURE_OUTCOMES,
    AttemptOutcome,
    ClaimedRun,
    ErrorInfo,
    FailureQuery,
    Instant,
    Lease,
    NodeAttempt,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    at,
)
from taskloom.engine.states import TERMINAL_STATES, TaskState
from taskloom.persistence.claims import SQLITE, claimable
from taskloom.persistence.sqlite import history, rows

_NO_CAP = 2**62


def check_fence(raw: sqlite3.Connection, lease: Lease) -> None:
    """Raise :class:`LeaseLostError` unless *lease* is still the task's lease."""
    found = raw.execute("SELECT token FROM leases WHERE task_id = ?", (lease.task_id,)).fetchone()
    if found is None or found[0] != lease.token:
        raise LeaseLostError(f"the lease of worker {lease.worker} on task {lease.task_id} is gone")


def claim_runs(
    raw: sqlite3.Connection,
    *,
    worker: str,
    workflows: frozenset[str | tuple[str, str]],
    now: Instant,
    lease_for: timedelta,
    limit: int,
    start: TaskMutation,
    reclaim_from: str | None,
    per_owner: int | None = None,
) -> list[ClaimedRun]:
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs` (fair: an owner's turn is
    its held leases plus its candidate's rank among its own, oldest first)."""
    rule = ClaimRule.of(workflows, reclaim_from)
    if rule.is_empty or limit < 1:
        return []
    now = at(now)  # in the writer's transaction: the time this claim commits at
    now_us = rows.micros(now)
    condition, parameters = claimable(rule, SQLITE)
    candidates = raw.execute(
        "WITH held AS ("
        "  SELECT coalesce(t.owner, '') AS who, count(*) AS n FROM leases l"
        "  JOIN tasks t ON t.id = l.task_id WHERE l.worker = :worker AND l.expires_at > :now"
        "  GROUP BY who),"
        " ready AS ("
        "  SELECT t.id, t.body, l.task_id IS NOT NULL AS had, t.seq, coalesce(t.owner, '') AS who,"
        "   row_number() OVER (PARTITION BY coalesce(t.owner, '') ORDER BY t.seq) AS rank"
        f"  FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition})"
        " SELECT r.id, r.body, r.had FROM ready r LEFT JOIN held h ON h.who = r.who"
        " WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= :cap)"
        " ORDER BY coalesce(h.n, 0) + r.rank, r.seq LIMIT :limit",
        {
            **parameters,
            "worker": worker,
            "now": now_us,
            "cap": per_owner if per_owner is not None else _NO_CAP,
            "limit": limit,
        },
    ).fetchall()
    claimed: list[ClaimedRun] = []
    expires = now + lease_for
    for task_id, body, had_lease in candidates:
        task = rows.task_from_body(body)
        nodes = node_runs(raw, task.id)
        started, lease = take(
            task, worker=worker, token=new_token(), expires_at=expires, start=start
        )
        if started is not task:
            raw.execute(rows.UPDATE_SQL, rows.update_row(started))
            history.record(raw, task, started)
        raw.execute(
            "INSERT INTO leases (task_id, worker, token, expires_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (task_id) DO UPDATE SET"
            " worker = excluded.worker, token = excluded.token, expires_at = excluded.expires_at",
            (task_id, worker, lease.token, rows.micros(expires)),
        )
        resumed = bool(had_lease) or bool(nodes) or task.state is not TaskState.QUEUED
        claimed.append(ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed))
    return claimed


def insert_lease(raw: sqlite3.Connection, lease: Lease) -> None:
    """Store *lease* on a task that has none (a create that claims its run)."""
    raw.execute(
        "INSERT INTO leases (task_id, worker, token, expires_at) VALUES (?, ?, ?, ?)",
        (lease.task_id, lease.worker, lease.token, rows.micros(lease.expires_at)),
    )


def renew_leases(
    raw: sqlite3.Connection, *, worker: str, now: Instant, lease_for: timedelta
) -> dict[TaskId, Task | None]:
    """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
    raw.execute(
        "UPDATE leases SET expires_at = ? WHERE worker = ?",
        (rows.micros(at(now) + lease_for), worker),
    )
    found = raw.execute(
        "SELECT l.task_id, t.body FROM leases l LEFT JOIN tasks t ON t.id = l.task_id"
        " WHERE l.worker = ?",
        (worker,),
    ).fetchall()
    return {
        TaskId(task_id): rows.task_from_body(body) if body is not None else None
        for task_id, body in found
    }


def release_lease(raw: sqlite3.Connection, lease: Lease) -> None:
    """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
    raw.execute("DELETE FROM leases WHERE task_id = ? AND token = ?", (lease.task_id, lease.token))


def close_abandoned(raw: sqlite3.Connection, task_id: TaskId, now: int) -> None:
    """End the attempts a run leaves open as it ends (see ``RunStore``): interrupted,
    their nodes ``retrying`` with one more interruption."""
    raw.execute(
        "UPDATE node_attempts SET ended_at = ?, outcome = 'interrupted'"
        " WHERE task_id = ? AND ended_at IS NULL",
        (now, task_id),
    )
    raw.execute(
        "UPDATE node_runs SET state = 'retrying', interruptions = interruptions + 1,"
        " updated_at = ? WHERE task_id = ? AND state = 'running'",
        (now, task_id),
    )


def start_node(raw: sqlite3.Connection, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
    """See :meth:`taskloom.engine.runs.RunStore.start_node`."""
    check_fence(raw, lease)
    state = raw.execute("SELECT state FROM tasks WHERE id = ?", (lease.task_id,)).fetchone()
    if state is None or TaskState(state[0]) in TERMINAL_STATES:
        raise TaskStateError(f"task {lease.task_id} has ended; no node may start")
    now_us = rows.micros(now)
    if start.interrupted_attempt is not None:
        raw.execute(
            "UPDATE node_attempts SET ended_at = ?, outcome = 'interrupted'"
            " WHERE task_id = ? AND node = ? AND attempt = ? AND ended_at IS NULL",
            (now_us, lease.task_id, start.node, start.interrupted_attempt),
        )
    raw.execute(
        "INSERT INTO node_runs (task_id, node, state, attempt, interruptions, updated_at)"
        " VALUES (?, ?, 'running', ?, ?, ?)"
        " ON CONFLICT (task_id, node) DO UPDATE SET state = 'running',"
        " attempt = excluded.attempt, interruptions = excluded.interruptions,"
        " not_before = NULL, waiting_for = NULL, updated_at = excluded.updated_at",
        (lease.task_id, start.node, start.attempt, start.interruptions, now_us),
    )
    raw.execute(
        "INSERT INTO node_attempts (task_id, node, attempt, worker, started_at)"
        " VALUES (?, ?, ?, ?, ?)",
        (lease.task_id, start.node, start.attempt, lease.worker, now_us),
    )
    return node_runs(raw, lease.task_id, start.node)[start.node]


def end_node(raw: sqlite3.Connection, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
    """See :meth:`taskloom.engine.runs.RunStore.end_node`."""
    check_fence(raw, lease)
    now_us = rows.micros(now)
    error = end.error.model_dump_json() if end.error is not None else None
    changed = raw.execute(
        "UPDATE node_runs SET state = ?, failures = failures + ?, output = ?, error = ?,"
        " not_before = ?, waiting_for = ?, interruptions = coalesce(?, interruptions),"
        " updated_at = ? WHERE task_id = ? AND node = ? AND attempt = ? AND state = 'running'",
        (
            end.state.value,
            int(end.outcome in FAILURE_OUTCOMES),
            json.dumps(end.output) if end.state is NodeState.COMPLETED else None,
            error,
            rows.micros(end.not_before) if end.not_before is not None else None,
            end.waiting_for,
            end.interruptions,
            now_us,
            lease.task_id,
            end.node,
            end.attempt,
        ),
    ).rowcount
    if changed != 1:
        raise LeaseLostError(f"node {end.node!r} of task {lease.task_id} is not running")
    raw.execute(
        "UPDATE node_attempts SET ended_at = ?, outcome = ?, error = ?"
        " WHERE task_id = ? AND node = ? AND attempt = ?",
        (now_us, end.outcome.value, error, lease.task_id, end.node, end.attempt),
    )
    found = node_runs(raw, lease.task_id, end.node)
    return found[end.node]


def fork_run(
    raw: sqlite3.Connection, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
) -> dict[str, NodeRun]:
    """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
    live = raw.execute(
        f"SELECT 1 FROM tasks WHERE id = ? AND {rows.LIVE}", (source, rows.micros(now))
    ).fetchone()
    if live is None:
        raise TaskNotFoundError(source)
    raw.execute(rows.INSERT_SQL, rows.insert_row(task))
    history.record(raw, None, task)
    names = sorted(nodes)
    if names:
        raw.execute(
            "INSERT INTO node_runs (task_id, node, state, attempt, failures, interruptions,"
            " not_before, output, error, updated_at)"
            " SELECT ?, node, state, attempt, failures, interruptions, NULL, output, error,"
            " updated_at FROM node_runs"
            f" WHERE task_id = ? AND state = 'completed' AND node IN ({', '.join('?' * len(names))})",
            (task.id, source, *names),
        )
    return node_runs(raw, task.id)


def node_runs(raw: sqlite3.Connection, task_id: str, node: str | None = None) -> dict[str, NodeRun]:
    """The checkpoints of a run (or of one of its nodes), by node name."""
    sql = (
        "SELECT node, state, attempt, failures, interruptions, not_before, waiting_for, output,"
        " error, updated_at FROM node_runs WHERE task_id = ?"
    )
    params: tuple[Any, ...] = (task_id,)
    if node is not None:
        sql += " AND node = ?"
        params = (task_id, node)
    found: dict[str, NodeRun] = {}
    for row in raw.execute(sql, params):
        (
            name,
            state,
            attempt,
            failures,
            interruptions,
            not_before,
            waiting_for,
            output,
            error,
            updated_at,
        ) = row
        found[name] = NodeRun(
            node=name,
            state=NodeState(state),
            attempt=attempt,
            failures=failures,
            interruptions=interruptions,
            not_before=rows.from_micros(not_before) if not_before is not None else None,
            waiting_for=waiting_for,
            output=_json(output),
            error=ErrorInfo.model_validate_json(error) if error is not None else None,
            updated_at=rows.from_micros(updated_at),
        )
    return found


def attempts(raw: sqlite3.Connection, task_id: TaskId) -> list[NodeAttempt]:
    """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
    return [
        NodeAttempt(
            task_id=task_id,
            node=node,
            attempt=attempt,
            worker=worker,
            started_at=rows.from_micros(started_at),
            ended_at=rows.from_micros(ended_at) if ended_at is not None else None,
            outcome=AttemptOutcome(outcome) if outcome is not None else None,
            error=ErrorInfo.model_validate_json(error) if error is not None else None,
        )
        for node, attempt, worker, started_at, ended_at, outcome, error in raw.execute(
            "SELECT node, attempt, worker, started_at, ended_at, outcome, error"
            " FROM node_attempts WHERE task_id = ? ORDER BY started_at, node, attempt",
            (task_id,),
        )
    ]


def failed_attempts(raw: sqlite3.Connection, query: FailureQuery, now: int) -> list[NodeAttempt]:
    """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
    where = [
        f"a.outcome IN ({', '.join('?' * len(FAILURE_OUTCOMES))})",
        "a.ended_at IS NOT NULL",
        "(t.expires_at IS NULL OR t.expires_at > ?)",
    ]
    params: list[object] = [*sorted(outcome.value for outcome in FAILURE_OUTCOMES), now]
    if query.match_owner and query.owner is None:
        where.append("t.owner IS NULL")
    elif query.match_owner:
        where.append("t.owner = ?")
        params.append(query.owner)
    params.append(query.limit)
    return [
        NodeAttempt(
            task_id=task_id,
            node=node,
            attempt=attempt,
            worker=worker,
            started_at=rows.from_micros(started_at),
            ended_at=rows.from_micros(ended_at),
            outcome=AttemptOutcome(outcome),
            error=ErrorInfo.model_validate_json(error) if error is not None else None,
        )
        for task_id, node, attempt, worker, started_at, ended_at, outcome, error in raw.execute(
            "SELECT a.task_id, a.node, a.attempt, a.worker, a.started_at, a.ended_at,"
            " a.outcome, a.error FROM node_attempts a JOIN tasks t ON t.id = a.task_id"
            f" WHERE {' AND '.join(where)}"
            " ORDER BY a.ended_at DESC, a.task_id DESC, a.node DESC, a.attempt DESC LIMIT ?",
            params,
        )
    ]


def _json(text: str | None) -> JsonValue:
    if text is None:
        return None
    value: JsonValue = json.loads(text)
    return value
