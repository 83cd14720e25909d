"""Runs' final writes (``RunStore.finish_run``) of any runs as one transaction (ADR 0055).

The final writes that wait at one moment (:mod:`.batches`) go as one transaction of
three statements whatever their number, where each alone took five round trips: the
tasks held (as a lone one holds its task, but never waiting for one another writer
holds: that one, or one gone, is written alone) and read with whether each has open
children; the node ends, ADR 0052's statement (:func:`.nodes.ends`: each row's lease
share-locked and checked, a node not running that attempt refused); the tasks' rows,
their history rows and the runs' ends (the lease dropped, the attempts left open closed,
as :func:`taskloom.persistence.sql.runs.end_run`) for the rows whose node end landed.
The transaction commits durably before any caller is answered, as a lone final write.

The mutation of each task is applied in Python between the first two statements. A
row is written in the batch only if its rule is the plain end of a run (the task's row,
the lease dropped, no parent, no open children) and its mutation succeeds; any other
row (a parent to tell, children to cancel, a mutation that refuses: a run cancelled
meanwhile) is written alone after the batch, as before, so the order of checks (the
task, the lease, the node, the mutation) and every cascade stay the lone write's. A
row refused by its node end wrote nothing: its task row is left as it was.
"""

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, Final

from taskloom.engine import cascade
from taskloom.engine.models import Task, TaskMutation
from taskloom.engine.runs import Lease, NodeEnd
from taskloom.engine.states import TERMINAL_STATES
from taskloom.persistence.postgres import nodes
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

Payload = tuple[Lease, NodeEnd, datetime, TaskMutation]
Outcome = tuple[bool, Any]

_TERMINAL: Final = TextArray(sorted(state.value for state in TERMINAL_STATES))
_LEADING: Final[Columns] = (("task", "text"), ("token", "text"), ("now", "timestamptz"))


def held(payloads: Sequence[Payload]) -> Statement:
    """The live tasks of *payloads* held for the write, each with whether it has
    children that have not ended (one row per payload, in their order; no body for a
    task gone, or held by another writer: the batch never waits for a task row, see
    :func:`_held_sql`)."""
    return Statement(
        _held_sql(),
        {
            "task": TextArray(lease.task_id for lease, _, _, _ in payloads),
            "now": TimeArray(now for _, _, now, _ in payloads),
            "e": _TERMINAL,
        },
    )


def plain_ends(
    payloads: Sequence[Payload], found: list[tuple[Any, ...]]
) -> list[cascade.Put | Exception | None]:
    """Each payload's task write if its rule is a run's plain end, or ``None``: to write
    alone (its task another writer's, or gone: the lone write refuses it)."""
    out: list[cascade.Put | Exception | None] = []
    for (lease, _, now, mutate), (body, open_children) in zip(payloads, found, strict=True):
        if body is None:
            out.append(None)
            continue
        out.append(_plain_end(task_from_body(body), mutate, lease, now, open_children))
    return out


def _plain_end(
    task: Task, mutate: TaskMutation, lease: Lease, now: datetime, open_children: bool
) -> cascade.Put | None:
    """The write of *task*'s rule when it is a run's plain end: its row, the lease
    dropped with the run's end, no parent to tell, no children left open."""
    rule = cascade.write(task, mutate, lease, now)
    try:
        first = next(rule)
        assert isinstance(first, cascade.Put)  # a write's first effect
        put = first
        if rule.send(None) != cascade.Drop(lease, True):
            return None  # a run that goes on, or parks
        if rule.send(None) != cascade.Read(task.id, children=True) or open_children:
            return None  # a parent to tell, children to cancel
        rule.send([])
    except StopIteration:  # (before the read: the task had ended before, no relatives)
        return put if put.after.is_terminal else None
    except Exception:  # noqa: BLE001  # the mutation refused: alone, in the checks' order
        return None
    finally:
        rule.close()
    return None  # more effects than a run's plain end


def node_ends(payloads: Sequence[Payload]) -> Statement:
    """The node ends of *payloads*: ADR 0052's statement."""
    return nodes.ends([(lease, end, now) for lease, end, now, _ in payloads])


def ended(payloads: Sequence[Payload], found: list[tuple[Any, ...]]) -> list[Outcome]:
    """Each node end's answer (its checkpoint, or its refusal)."""
    return nodes.ended([(lease, end, now) for lease, end, now, _ in payloads], found)


def run_ends(payloads: Sequence[Payload], puts: Sequence[cascade.Put]) -> Statement:
    """The statement that writes each of *puts* with its history row and ends its run:
    the lease dropped (if still this token's), the attempts left open interrupted, the
    nodes still running set to retry (:func:`taskloom.persistence.sql.runs.end_run`)."""
    arrays = TaskArrays(_LEADING)
    for (lease, _, now, _), put in zip(payloads, puts, strict=True):
        arrays.add((lease.task_id, lease.token, now), put.before, put.after)
    parameters = arrays.parameters()
    return Statement(_run_ends_sql(), parameters)


@cache
def _held_sql() -> str:
    """The task rows held ``FOR NO KEY UPDATE`` (as every writer holds them, which leaves
    the foreign-key checks of the node writes' inserts alone) where no other writer holds
    them: task rows have no one lock order (a cascade holds a parent before its children,
    a child's end the child before its parent), so waiting for one while holding others
    could deadlock with them."""
    open_children = (
        "EXISTS (SELECT FROM tasks c WHERE c.parent_id = i.task"
        " AND (c.expires_at IS NULL OR c.expires_at > i.now) AND NOT c.state = ANY(%(e)b::text[]))"
    )
    return (
        "WITH i AS MATERIALIZED (SELECT * FROM unnest(%(task)b::text[], %(now)b::timestamptz[])"
        " WITH ORDINALITY AS i(task, now, n)), held AS MATERIALIZED (SELECT t.id, t.body,"
        " t.expires_at FROM tasks t WHERE t.id = ANY(%(task)b::text[]) ORDER BY t.id"
        f"{POSTGRES.row_lock} OF t SKIP LOCKED) SELECT h.body, {open_children} FROM i LEFT JOIN held h"
        " ON h.id = i.task AND (h.expires_at IS NULL OR h.expires_at > i.now) ORDER BY i.n"
    )


@cache
def _run_ends_sql() -> str:
    given = unnest_sql(_LEADING, ordinality=False)
    put = put_sql("i x", "t.id = x.task")
    added = history_sql("i x")
    dropped = (
        "dropped AS (DELETE FROM leases l USING i x WHERE l.task_id = x.task AND l.token = x.token)"
    )
    closed = (
        "closed AS (UPDATE node_attempts a SET ended_at = x.now, outcome = 'interrupted'"
        " FROM i x WHERE a.task_id = x.task AND a.ended_at IS NULL)"
    )
    retried = (
        "retried AS (UPDATE node_runs r SET state = 'retrying',"
        " interruptions = r.interruptions + 1, updated_at = x.now FROM i x"
        " WHERE r.task_id = x.task AND r.state = 'running')"
    )
    return f"WITH {given}, {put}, {added}, {dropped}, {closed}, {retried} SELECT count(*) FROM i"
