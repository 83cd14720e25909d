"""Run transactions of the PostgreSQL store (leases, node checkpoints, attempts).

Each function runs inside one transaction of the connection it is given. Writers lock a
task row (``FOR NO KEY UPDATE``, which leaves the foreign-key checks of checkpoint inserts
alone) before its lease row. The one cycle left, purging an expired task while its worker
writes a checkpoint, is broken by PostgreSQL's deadlock detector and the loser retried.
"""

import json
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
from taskloom.persistence.claims import POSTGRES, claimable
from taskloom.persistence.postgres import history, rows
from taskloom.persistence.postgres.driver import Connection

_NO_CAP = 2**62


async def check_fence(connection: Connection, lease: Lease) -> None:
    """Raise :class:`LeaseLostError` unless *lease* is still the task's lease.

    The lease row stays share-locked until the transaction ends, so no claim can take
    the run over between this check and the fenced write.
    """
    cursor = await connection.execute(
        "SELECT token FROM leases WHERE task_id = %s FOR SHARE", (lease.task_id,)
    )
    found = await cursor.fetchone()
    if found is None or found[0] != lease.token:
        raise LeaseLostError(f"the lease of worker {lease.worker} on task {lease.task_id} is gone")


async def claim_runs(
    connection: Connection,
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
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs`.

    Fair across owners: an owner's turn is the leases it holds of *worker* plus the
    candidate's rank among its own (oldest first); the chosen rows are then locked.

    Candidates are locked with ``FOR NO KEY UPDATE SKIP LOCKED`` (workers never queue behind
    each other); the lease is then taken by a conditional upsert, the verdict that
    settles a race with a claim that read an older snapshot.
    """
    rule = ClaimRule.of(workflows, reclaim_from)
    if rule.is_empty or limit < 1:
        return []
    now = at(now)  # in this transaction attempt: a retried claim never commits a stale lease
    condition, parameters = claimable(rule, POSTGRES)
    cursor = await connection.execute(
        "WITH held AS ("
        "  SELECT coalesce(t.owner, '') AS who, count(*) AS n FROM leases l"
        "  JOIN tasks t ON t.id = l.task_id"
        "  WHERE l.worker = %(worker)s AND l.expires_at > %(now)s GROUP BY 1),"
        " ready AS ("
        "  SELECT t.id, t.position, coalesce(t.owner, '') AS who,"
        "   row_number() OVER (PARTITION BY coalesce(t.owner, '') ORDER BY t.position) AS rank"
        f"  FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition}),"
        " chosen AS ("
        "  SELECT r.id FROM ready r LEFT JOIN held h ON h.who = r.who"
        "  WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= %(cap)s)"
        "  ORDER BY coalesce(h.n, 0) + r.rank, r.position LIMIT %(limit)s)"
        " SELECT t.body, l.task_id IS NOT NULL FROM tasks t"
        " LEFT JOIN leases l ON l.task_id = t.id"
        " WHERE t.id IN (SELECT id FROM chosen)"
        " FOR NO KEY UPDATE OF t SKIP LOCKED",
        {
            **parameters,
            "now": now,
            "limit": limit,
            "worker": worker,
            "cap": per_owner if per_owner is not None else _NO_CAP,
        },
    )
    candidates = [
        (rows.task_from_body(body), had_lease) for body, had_lease in await cursor.fetchall()
    ]
    claimed: list[ClaimedRun] = []
    expires = now + lease_for
    # Leases are taken in task id order, as renew_leases locks them (no deadlock);
    # Python's order of these ASCII ids is PostgreSQL's ``COLLATE "C"``.
    for task, had_lease in sorted(candidates, key=lambda candidate: candidate[0].id):
        started, lease = take(
            task, worker=worker, token=new_token(), expires_at=expires, start=start
        )
        taken = await connection.execute(
            "INSERT INTO leases (task_id, worker, token, expires_at)"
            " VALUES (%(task)s, %(worker)s, %(token)s, %(expires)s)"
            " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
            " token = excluded.token, expires_at = excluded.expires_at"
            " WHERE leases.expires_at <= %(now)s OR leases.worker = %(reclaim)s",
            {
                "task": task.id,
                "worker": worker,
                "token": lease.token,
                "expires": expires,
                "now": now,
                "reclaim": reclaim_from,
            },
        )
        if taken.rowcount != 1:
            continue  # another worker took it since our snapshot
        nodes = await node_runs(connection, task.id)
        if started is not task:
            await connection.execute(rows.UPDATE_SQL, rows.update_row(started))
            await history.record(connection, task, started)
        resumed = bool(had_lease) or bool(nodes) or task.state is not TaskState.QUEUED
        claimed.append(ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed))
    oldest_first = {task.id: index for index, (task, _) in enumerate(candidates)}
    return sorted(claimed, key=lambda run: oldest_first[run.task.id])


async def insert_lease(connection: Connection, lease: Lease) -> None:
    """Store *lease* on a task that has none (a create that claims its run)."""
    await connection.execute(
        "INSERT INTO leases (task_id, worker, token, expires_at) VALUES (%s, %s, %s, %s)",
        (lease.task_id, lease.worker, lease.token, lease.expires_at),
    )


async def renew_leases(
    connection: Connection, *, worker: str, now: Instant, lease_for: timedelta
) -> dict[TaskId, Task | None]:
    """See :meth:`taskloom.engine.runs.RunStore.renew_leases`.

    The rows are locked in ``task_id`` order (bytewise, ``COLLATE "C"``, as Python sorts
    the ASCII ids) before the update, the order in which :func:`claim_runs` takes
    leases: a bare multi-row ``UPDATE`` locks in the heap's order, which deadlocked with
    a claim taking over some of the same (expired) leases.
    """
    cursor = await connection.execute(
        "WITH held AS ("
        "  SELECT task_id FROM leases WHERE worker = %(worker)s"
        '  ORDER BY task_id COLLATE "C" FOR NO KEY UPDATE),'
        " renewed AS ("
        "  UPDATE leases l SET expires_at = %(expires)s FROM held"
        "  WHERE l.task_id = held.task_id AND l.worker = %(worker)s RETURNING l.task_id)"
        " SELECT r.task_id, t.body FROM renewed r LEFT JOIN tasks t ON t.id = r.task_id",
        {"expires": at(now) + lease_for, "worker": worker},
    )
    return {
        TaskId(task_id): rows.task_from_body(body) if body is not None else None
        for task_id, body in await cursor.fetchall()
    }


async def release_lease(connection: Connection, lease: Lease) -> None:
    """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
    await connection.execute(
        "DELETE FROM leases WHERE task_id = %s AND token = %s", (lease.task_id, lease.token)
    )


async def end_run(connection: Connection, lease: Lease, now: datetime) -> None:
    """Drop *lease* and end the attempts its run leaves open as it ends (see
    ``RunStore``): interrupted, their nodes ``retrying`` with one more interruption. One
    statement, so the run's end costs no extra round trip."""
    await connection.execute(
        "WITH released AS ("
        "  DELETE FROM leases WHERE task_id = %(task)s AND token = %(token)s),"
        " closed AS ("
        "  UPDATE node_attempts SET ended_at = %(now)s, outcome = 'interrupted'"
        "  WHERE task_id = %(task)s AND ended_at IS NULL)"
        " UPDATE node_runs SET state = 'retrying', interruptions = interruptions + 1,"
        " updated_at = %(now)s WHERE task_id = %(task)s AND state = 'running'",
        {"now": now, "task": lease.task_id, "token": lease.token},
    )


_NODE_COLUMNS = (
    "node, state, attempt, failures, interruptions, not_before, waiting_for, output, error,"
    " updated_at"
)


async def start_node(
    connection: Connection, lease: Lease, start: NodeStart, now: datetime
) -> NodeRun:
    """See :meth:`taskloom.engine.runs.RunStore.start_node`.

    Two statements: the fence and the task's state, then every write in one.
    """
    cursor = await connection.execute(
        "SELECT l.token, t.state FROM leases l JOIN tasks t ON t.id = l.task_id"
        " WHERE l.task_id = %s FOR SHARE OF l",
        (lease.task_id,),
    )
    found = await cursor.fetchone()
    if found is None or found[0] != lease.token:
        raise LeaseLostError(f"the lease of worker {lease.worker} on task {lease.task_id} is gone")
    if TaskState(found[1]) in TERMINAL_STATES:
        raise TaskStateError(f"task {lease.task_id} has ended; no node may start")
    cursor = await connection.execute(
        "WITH interrupted AS ("
        "  UPDATE node_attempts SET ended_at = %(now)s, outcome = 'interrupted'"
        "  WHERE task_id = %(task)s AND node = %(node)s AND attempt = %(interrupted)s"
        "  AND ended_at IS NULL),"
        " opened AS ("
        "  INSERT INTO node_attempts (task_id, node, attempt, worker, started_at)"
        "  VALUES (%(task)s, %(node)s, %(attempt)s, %(worker)s, %(now)s))"
        " INSERT INTO node_runs (task_id, node, state, attempt, interruptions, updated_at)"
        " VALUES (%(task)s, %(node)s, 'running', %(attempt)s, %(interruptions)s, %(now)s)"
        " ON CONFLICT (task_id, node) DO UPDATE SET state = 'running',"
        " attempt = excluded.attempt, interruptions = excluded.interruptions,"
        " not_before = NULL, waiting_for = NULL, updated_at = excluded.updated_at"
        f" RETURNING {_NODE_COLUMNS}",
        {
            "task": lease.task_id,
            "node": start.node,
            "attempt": start.attempt,
            "interruptions": start.interruptions,
            "interrupted": start.interrupted_attempt,
            "worker": lease.worker,
            "now": now,
        },
    )
    row = await cursor.fetchone()
    assert row is not None  # an upsert always returns its row
    return _node_run(row)


async def end_node(connection: Connection, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
    """See :meth:`taskloom.engine.runs.RunStore.end_node`.

    Two statements: the fence, then the checkpoint and the attempt's end in one.
    """
    await check_fence(connection, lease)
    error = end.error.model_dump_json() if end.error is not None else None
    cursor = await connection.execute(
        "WITH ended AS ("
        "  UPDATE node_runs SET state = %(state)s, failures = failures + %(failed)s,"
        "  output = %(output)s, error = %(error)s, not_before = %(not_before)s,"
        "  waiting_for = %(waiting_for)s,"
        "  interruptions = coalesce(%(interruptions)s, interruptions), updated_at = %(now)s"
        "  WHERE task_id = %(task)s AND node = %(node)s AND attempt = %(attempt)s"
        f"  AND state = 'running' RETURNING {_NODE_COLUMNS}),"
        " closed AS ("
        "  UPDATE node_attempts SET ended_at = %(now)s, outcome = %(outcome)s, error = %(error)s"
        "  WHERE task_id = %(task)s AND node = %(node)s AND attempt = %(attempt)s"
        "  AND EXISTS (SELECT FROM ended))"
        " SELECT * FROM ended",
        {
            "state": end.state.value,
            "failed": int(end.outcome in FAILURE_OUTCOMES),
            "output": json.dumps(end.output) if end.state is NodeState.COMPLETED else None,
            "error": error,
            "not_before": end.not_before,
            "waiting_for": end.waiting_for,
            "interruptions": end.interruptions,
            "now": now,
            "task": lease.task_id,
            "node": end.node,
            "attempt": end.attempt,
            "outcome": end.outcome.value,
        },
    )
    row = await cursor.fetchone()
    if row is None:
        raise LeaseLostError(f"node {end.node!r} of task {lease.task_id} is not running")
    return _node_run(row)


async def fork_run(
    connection: Connection, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
) -> dict[str, NodeRun]:
    """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
    cursor = await connection.execute(
        "SELECT 1 FROM tasks WHERE id = %s AND (expires_at IS NULL OR expires_at > %s)",
        (source, now),
    )
    if await cursor.fetchone() is None:
        raise TaskNotFoundError(source)
    await connection.execute(rows.INSERT_SQL, rows.insert_row(task))
    await history.record(connection, None, task)
    if nodes:
        await connection.execute(
            "INSERT INTO node_runs (task_id, node, state, attempt, failures, interruptions,"
            " not_before, output, error, updated_at)"
            " SELECT %s, node, state, attempt, failures, interruptions, NULL, output, error,"
            " updated_at FROM node_runs"
            " WHERE task_id = %s AND state = 'completed' AND node = ANY(%s)",
            (task.id, source, sorted(nodes)),
        )
    return await node_runs(connection, task.id)


async def node_runs(connection: Connection, task_id: str) -> dict[str, NodeRun]:
    """The checkpoints of a run, by node name."""
    cursor = await connection.execute(
        f"SELECT {_NODE_COLUMNS} FROM node_runs WHERE task_id = %s", (task_id,)
    )
    return {run.node: run for run in map(_node_run, await cursor.fetchall())}


def _node_run(row: tuple[Any, ...]) -> NodeRun:
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
    return NodeRun(
        node=name,
        state=NodeState(state),
        attempt=attempt,
        failures=failures,
        interruptions=interruptions,
        not_before=rows.utc(not_before) if not_before is not None else None,
        waiting_for=waiting_for,
        output=_json(output),
        error=ErrorInfo.model_validate_json(error) if error is not None else None,
        updated_at=rows.utc(updated_at),
    )


async def attempts(connection: Connection, task_id: TaskId) -> list[NodeAttempt]:
    """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
    cursor = await connection.execute(
        "SELECT node, attempt, worker, started_at, ended_at, outcome, error"
        " FROM node_attempts WHERE task_id = %s ORDER BY started_at, node, attempt",
        (task_id,),
    )
    return [
        NodeAttempt(
            task_id=task_id,
            node=node,
            attempt=attempt,
            worker=worker,
            started_at=rows.utc(started_at),
            ended_at=rows.utc(ended_at) if ended_at is not None else None,
            outcome=AttemptOutcome(outcome) if outcome is not None else None,
            error=ErrorInfo.model_validate_json(error) if error is not None else None,
        )
        for node, attempt, worker, started_at, ended_at, outcome, error in await cursor.fetchall()
    ]


async def failed_attempts(
    connection: Connection, query: FailureQuery, now: datetime
) -> list[NodeAttempt]:
    """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
    where = [
        "a.outcome = ANY(%s)",
        "a.ended_at IS NOT NULL",
        "(t.expires_at IS NULL OR t.expires_at > %s)",
    ]
    params: list[object] = [sorted(outcome.value for outcome in FAILURE_OUTCOMES), now]
    if query.match_owner and query.owner is None:
        where.append("t.owner IS NULL")
    elif query.match_owner:
        where.append("t.owner = %s")
        params.append(query.owner)
    params.append(query.limit)
    cursor = await connection.execute(
        "SELECT a.task_id, a.node, a.attempt, a.worker, a.started_at, a.ended_at,"
        " a.outcome, a.error FROM node_attempts a JOIN tasks t ON t.id = a.task_id"
        f" WHERE {' AND '.join(where)}"
        " ORDER BY a.ended_at DESC, a.task_id DESC, a.node DESC, a.attempt DESC LIMIT %s",
        params,
    )
    return [
        NodeAttempt(
            task_id=task_id,
            node=node,
            attempt=attempt,
            worker=worker,
            started_at=rows.utc(started_at),
            ended_at=rows.utc(ended_at),
            outcome=AttemptOutcome(outcome),
            error=ErrorInfo.model_validate_json(error) if error is not None else None,
        )
        for task_id, node, attempt, worker, started_at, ended_at, outcome, error in (
            await cursor.fetchall()
        )
    ]


def _json(text: str | None) -> JsonValue:
    if text is None:
        return None
    value: JsonValue = json.loads(text)
    return value
