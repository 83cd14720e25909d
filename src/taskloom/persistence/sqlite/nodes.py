"""A run's node starts, or ends, many in one go (ADR 0051).

The group-commit writer merges the starts (or the ends) of one run's nodes that wait in
one batch into one call of :func:`start_many` (or :func:`end_many`): the lease fence is
read once for all of them, and the rows are written by one statement over a JSON list
(starts) or one prepared statement run for each (ends), instead of a script, a
savepoint and a fence read per node. The rules are those of
:func:`taskloom.persistence.sql.runs.start_node` and ``end_node`` (their texts, their
checks; the ends' updates with positional parameters, their guard that the node runs
that attempt checked by the read before them): a refused start or end writes nothing,
and one alone runs that script as before.
"""

import json
import sqlite3
from collections.abc import Sequence
from functools import cache
from typing import Any, Final

from taskloom.engine.errors import TaskloomError
from taskloom.engine.runs import (
    FAILURE_OUTCOMES,
    AttemptOutcome,
    Lease,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    trusted_node_run,
)
from taskloom.persistence.sql import rows, runs
from taskloom.persistence.sql.dialect import SQLITE
from taskloom.persistence.sql.script import run_sync

Outcome = tuple[bool, Any]
StartPayload = tuple[Lease, NodeStart, int]
EndPayload = tuple[Lease, NodeEnd, int]


def start_many(payloads: Sequence[StartPayload], raw: sqlite3.Connection) -> list[Outcome]:
    """Start every node of *payloads* (one lease): their checkpoints, or the fence's
    refusal for all (raised)."""
    lease = payloads[0][0]
    fence, _ = runs.start_fence(SQLITE)
    runs.check_start(lease, raw.execute(fence.read, {"task": lease.task_id}).fetchone())
    names = [start.node for _, start, _ in payloads]
    if len(set(names)) < len(names):
        return _one_by_one(payloads, start_one, raw)
    close, _, _ = runs.start_writes(SQLITE, "")
    for _, start, now in payloads:
        if start.interrupted_attempt is not None:
            raw.execute(
                close,
                {
                    "now": now,
                    "task": lease.task_id,
                    "node": start.node,
                    "interrupted": start.interrupted_attempt,
                },
            )
    listed = json.dumps(
        [[start.node, start.attempt, start.interruptions, now] for _, start, now in payloads]
    )
    parameters = {"task": lease.task_id, "worker": lease.worker, "starts": listed}
    attempts_sql, runs_sql = _start_sql()
    raw.execute(attempts_sql, parameters)
    found = raw.execute(runs_sql, parameters).fetchall()
    started = {run.node: run for run in map(_started, found)}
    return [(True, started[name]) for name in names]


def end_many(payloads: Sequence[EndPayload], raw: sqlite3.Connection) -> list[Outcome]:
    """End every attempt of *payloads* (one lease): each its checkpoint, or its refusal
    (not running that attempt); the fence's refusal for all is raised."""
    lease = payloads[0][0]
    fence = runs.end_fence(SQLITE)
    runs.check_end(lease, raw.execute(fence.read, {"task": lease.task_id}).fetchone())
    names = [end.node for _, end, _ in payloads]
    if len(set(names)) < len(names):
        return _one_by_one(payloads, end_one, raw)
    task = lease.task_id
    listed = {"task": task, "nodes": json.dumps(names)}
    running = {row[0]: row for row in raw.execute(_running_sql(), listed)}
    attempts: list[tuple[object, ...]] = []
    checkpoints: list[tuple[object, ...]] = []
    completed: list[tuple[object, ...]] = []
    outcomes: list[Outcome] = []
    for _, end, now in payloads:
        row = running.get(end.node)
        if row is None or row[1] != end.attempt:
            outcomes.append((False, runs.not_running(lease, end.node)))
            continue
        outcomes.append((True, _ended(row, end, now)))
        if _plainly_completed(end):
            completed.append((now, json.dumps(end.output), task, end.node, end.attempt))
            continue
        error = end.error.model_dump_json() if end.error is not None else None
        output = json.dumps(end.output) if end.state is NodeState.COMPLETED else None
        attempts.append((now, end.outcome.value, error, task, end.node, end.attempt))
        checkpoints.append(
            (
                end.state.value,
                int(end.outcome in FAILURE_OUTCOMES),
                output,
                error,
                SQLITE.stored(end.not_before),
                end.waiting_for,
                end.interruptions,
                now,
                task,
                end.node,
                end.attempt,
            )
        )
    if completed:
        raw.executemany(END_ATTEMPT_COMPLETED, completed)
        raw.executemany(END_CHECKPOINT_COMPLETED, completed)
    if attempts:
        raw.executemany(END_ATTEMPT, attempts)
        raw.executemany(END_CHECKPOINT, checkpoints)
    return outcomes


def _plainly_completed(end: NodeEnd) -> bool:
    """True for the end most nodes have: completed, nothing else to say (no error, no
    wait, no count of interruptions), written by the ``*_COMPLETED`` texts."""
    return (
        end.state is NodeState.COMPLETED
        and end.outcome is AttemptOutcome.COMPLETED
        and end.error is None
        and end.not_before is None
        and end.waiting_for is None
        and end.interruptions is None
    )


def _ended(running: tuple[Any, ...], end: NodeEnd, now: int) -> NodeRun:
    """The checkpoint *end* leaves of a node running that attempt (*running*: its
    ``node_runs`` row, :func:`_running_sql`'s columns), as the end's update writes it and
    ``engine.runs.node_ended`` states it: built here rather than read back."""
    node, attempt, failures, interruptions = running
    return trusted_node_run(
        node=node,
        state=end.state,
        attempt=attempt,
        failures=failures + int(end.outcome in FAILURE_OUTCOMES),
        interruptions=interruptions if end.interruptions is None else end.interruptions,
        not_before=end.not_before,
        waiting_for=end.waiting_for,
        output=end.output if end.state is NodeState.COMPLETED else None,
        error=end.error,
        updated_at=SQLITE.moment(now),
    )


def _started(row: tuple[Any, ...]) -> NodeRun:
    """A started node's checkpoint from its row (:data:`rows.NODE_COLUMNS`)."""
    return rows.node_run(SQLITE, row)


def _one_by_one(payloads: Sequence[Any], one: Any, raw: sqlite3.Connection) -> list[Outcome]:
    """Each payload by its own script, in order (the same node twice in one batch)."""
    outcomes: list[Outcome] = []
    for payload in payloads:
        try:
            outcomes.append((True, one(payload, raw)))
        except TaskloomError as refusal:  # refused before it wrote anything
            outcomes.append((False, refusal))
    return outcomes


def start_one(payload: StartPayload, raw: sqlite3.Connection) -> NodeRun:
    """One start alone: the shared script of :func:`runs.start_node`."""
    lease, start, now = payload
    return run_sync(runs.start_node(SQLITE, lease, start, now), raw.execute)


def end_one(payload: EndPayload, raw: sqlite3.Connection) -> NodeRun:
    """One end alone: the shared script of :func:`runs.end_node`."""
    lease, end, now = payload
    return run_sync(runs.end_node(SQLITE, lease, end, now), raw.execute)


@cache
def _start_sql() -> tuple[str, str]:
    """The attempts and the checkpoints of a list of starts ``[node, attempt,
    interruptions, now]``, as :func:`runs.start_node` writes one."""
    each = "FROM json_each(:starts)"
    node, attempt = "json_extract(value, '$[0]')", "json_extract(value, '$[1]')"
    interruptions, now = "json_extract(value, '$[2]')", "json_extract(value, '$[3]')"
    attempts = (
        "INSERT INTO node_attempts (task_id, node, attempt, worker, started_at)"
        f" SELECT :task, {node}, {attempt}, :worker, {now} {each}"
    )
    checkpoints = (
        "INSERT INTO node_runs (task_id, node, state, attempt, interruptions, updated_at)"
        f" SELECT :task, {node}, 'running', {attempt}, {interruptions}, {now} {each} WHERE true"
        + runs.RESTARTED
    )
    return attempts, checkpoints


END_ATTEMPT: Final = (
    "UPDATE node_attempts SET ended_at = ?, outcome = ?, error = ?"
    " WHERE task_id = ? AND node = ? AND attempt = ?"
)
"""An attempt's end, as :func:`runs.end_writes` writes it, with positional parameters
and without its guard that the node is running that attempt: :func:`end_many` read the
running rows in this savepoint, under the write lock, and lists only those."""
END_CHECKPOINT: Final = (
    "UPDATE node_runs SET state = ?, failures = failures + ?, output = ?, error = ?,"
    " not_before = ?, waiting_for = ?, interruptions = coalesce(?, interruptions),"
    " updated_at = ? WHERE task_id = ? AND node = ? AND attempt = ? AND state = 'running'"
)
"""The checkpoint's update of :func:`runs.end_writes`, with positional parameters."""
END_ATTEMPT_COMPLETED: Final = (
    "UPDATE node_attempts SET ended_at = ?1, outcome = 'completed', error = NULL"
    " WHERE task_id = ?3 AND node = ?4 AND attempt = ?5"
)
""":data:`END_ATTEMPT` of a plainly completed end (:func:`_plainly_completed`), its
constants written in the text: the sqlite3 module adapts each ``None`` it binds (a
dictionary lookup and two attribute lookups), and most nodes end so. Its parameters are
those of :data:`END_CHECKPOINT_COMPLETED`: ``(now, output, task, node, attempt)``."""
END_CHECKPOINT_COMPLETED: Final = (
    "UPDATE node_runs SET state = 'completed', output = ?2, error = NULL,"
    " not_before = NULL, waiting_for = NULL, updated_at = ?1"
    " WHERE task_id = ?3 AND node = ?4 AND attempt = ?5 AND state = 'running'"
)
""":data:`END_CHECKPOINT` of a plainly completed end: no failure counted, the
interruptions kept."""


@cache
def _running_sql() -> str:
    """Each listed node that is running: its name, attempt, failures and interruptions."""
    return (
        "SELECT node, attempt, failures, interruptions FROM node_runs"
        " WHERE task_id = :task AND node IN (SELECT value FROM json_each(:nodes))"
        " AND state = 'running'"
    )
