"""Fenced task updates (a run's progress, mostly) of any runs as one statement (ADR 0055).

A worker's fenced :meth:`~taskloom.engine.ports.TaskStore.update` that waits at one moment
with others goes in one batch (:mod:`.batches`): the batch reads the tasks (one read,
no lock), applies each caller's mutation in Python, and writes every successor whose
rule is a plain write of its row (:class:`taskloom.engine.cascade.Put` and nothing
else) with one statement over arrays, in its own transaction (``Database.alone``). The
statement holds the task rows no other writer holds (never waiting for one: task rows
have no one lock order) and share-locks their lease rows (bytewise task order), as a
lone update holds them; each row is written only if its fence allows it and the task is
still the version the mutation saw (compare and swap: nothing is held between the read
and the write). One answer per row: whether it was held, the token found and whether
the row was written. A lost lease refuses that caller alone; a task another writer
holds, written meanwhile (or expired), or a mutation that sets off more than its own row (a run's end, a park:
a lease dropped, a parent or children read), is written as before, alone, in a locked
transaction (``SqlStore.update``'s script).
"""

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, Final

from taskloom.engine import cascade
from taskloom.engine.errors import LeaseLostError, TaskNotFoundError
from taskloom.engine.models import TaskId, TaskMutation
from taskloom.engine.runs import Lease
from taskloom.persistence.postgres.arrays import TextArray, TimeArray
from taskloom.persistence.postgres.rows import task_from_body
from taskloom.persistence.postgres.task_arrays import (
    Columns,
    TaskArrays,
    history_sql,
    put_sql,
    unnest_sql,
)
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.script import Statement

Payload = tuple[TaskId, datetime, TaskMutation, Lease]
Outcome = tuple[bool, Any]

_LEADING: Final[Columns] = (
    ("task", "text"),
    ("token", "text"),
    ("before", "int"),
    ("now", "timestamptz"),
)


def read(payloads: Sequence[Payload]) -> Statement:
    """The bodies of the live tasks of *payloads* and their lease tokens (no lock: the
    write checks the fence again and compares versions)."""
    ids = TextArray(task_id for task_id, _, _, _ in payloads)
    nows = TimeArray(now for _, now, _, _ in payloads)
    return Statement(_read_sql(), {"task": ids, "now": nows})


def mutated(
    payloads: Sequence[Payload], found: list[tuple[Any, ...]]
) -> list[cascade.Put | Exception | None]:
    """Each payload's write (a :class:`~taskloom.engine.cascade.Put`), or its refusal
    (the task missing, the lease lost, the mutation's own error), or ``None``: to write alone (its rule
    sets off more than its own row)."""
    tasks = {task_id: (body, token) for task_id, body, token in found}
    out: list[cascade.Put | Exception | None] = []
    for task_id, now, mutate, fence in payloads:
        body, token = tasks.get(task_id, (None, None))
        if body is None:
            out.append(TaskNotFoundError(task_id))
            continue
        if token != fence.token:  # checked before the mutation, as a lone update does
            out.append(_lease_lost(fence))
            continue
        rule = cascade.write(task_from_body(body), mutate, fence, now)
        try:
            put = next(rule)
            assert isinstance(put, cascade.Put)  # a write's first effect
        except Exception as refusal:  # noqa: BLE001  # the mutation's, this caller's answer
            out.append(refusal)
            continue
        try:
            rule.send(None)
        except StopIteration:
            out.append(put)
        else:
            rule.close()
            out.append(None)
    return out


def writes(payloads: Sequence[Payload], puts: Sequence[cascade.Put]) -> Statement:
    """The statement that writes each of *puts* (one per payload, in their order) whose
    fence allows it and whose task is still the version it was made from."""
    arrays = TaskArrays(_LEADING)
    for (task_id, now, _, fence), put in zip(payloads, puts, strict=True):
        arrays.add((task_id, fence.token, put.before.version, now), put.before, put.after)
    parameters = arrays.parameters()
    return Statement(_write_sql(), parameters)


def written(
    payloads: Sequence[Payload], puts: Sequence[cascade.Put], found: list[tuple[Any, ...]]
) -> list[Outcome | None]:
    """Each write's answer from :func:`writes`' rows: the successor, the lease lost, or
    ``None``: to write alone (the task held by another writer, changed or expired since
    the read)."""
    out: list[Outcome | None] = []
    for (_, _, _, fence), put, (held, token, wrote) in zip(payloads, puts, found, strict=True):
        if held is None:
            out.append(None)  # another writer holds it (or it is gone): alone, waiting
        elif token != fence.token:
            out.append((False, _lease_lost(fence)))
        elif wrote is None:
            out.append(None)
        else:
            out.append((True, put.after))
    return out


def _lease_lost(lease: Lease) -> LeaseLostError:
    """The refusal of a lone fenced update whose lease is gone (``runs.check_fence``'s)."""
    return LeaseLostError(f"the lease of worker {lease.worker} on task {lease.task_id} is gone")


@cache
def _read_sql() -> str:
    return (
        "SELECT i.task, t.body, l.token FROM unnest(%(task)b::text[],"
        " %(now)b::timestamptz[]) AS i(task, now) JOIN tasks t ON t.id = i.task"
        " AND (t.expires_at IS NULL OR t.expires_at > i.now)"
        " LEFT JOIN leases l ON l.task_id = i.task"
    )


@cache
def _write_sql() -> str:
    """The task rows held (``FOR NO KEY UPDATE``, as every writer holds them, which
    leaves the foreign-key checks of the node writes' inserts alone) where no other
    writer holds them, never waiting for one: task rows have no one lock order (a
    cascade holds a parent before its children, a child's end the child before its
    parent), so a statement that waited for one task row while holding others could
    deadlock with them; a row passed over is written alone, waiting as a lone update
    does. Then the lease rows share-locked in bytewise task order (as the node writes and
    the renewals lock them, ADR 0052); the rows each fence allows written if unchanged
    since the read, with their history rows (a status-only row under the cap); one
    answer per row in their order: whether it was held, its lease token, whether it was
    written."""
    given = unnest_sql(_LEADING, ordinality=True)
    held = (
        "held AS MATERIALIZED (SELECT t.id FROM tasks t WHERE t.id = ANY(%(task)b::text[])"
        f" ORDER BY t.id{POSTGRES.row_lock} OF t SKIP LOCKED)"
    )
    fence = (
        "fence AS MATERIALIZED (SELECT l.task_id, l.token FROM held h"
        " JOIN leases l ON l.task_id = h.id"
        ' ORDER BY l.task_id COLLATE "C" FOR SHARE OF l)'
    )
    allowed = (
        "allowed AS MATERIALIZED (SELECT i.* FROM i JOIN fence f"
        " ON f.task_id = i.task AND f.token = i.token)"
    )
    put = put_sql(
        "allowed x",
        "t.id = x.task AND t.version = x.before AND (t.expires_at IS NULL OR t.expires_at > x.now)",
        returning=" RETURNING t.id",
    )
    added = history_sql("allowed x JOIN put p ON p.id = x.task")
    return (
        f"WITH {given}, {held}, {fence}, {allowed}, {put}, {added} SELECT h.id, f.token, p.id"
        " FROM i LEFT JOIN held h ON h.id = i.task LEFT JOIN fence f ON f.task_id = i.task"
        " LEFT JOIN put p ON p.id = i.task ORDER BY i.n"
    )
