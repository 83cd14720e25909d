"""Node starts, or ends, of any runs as one statement each (ADR 0052).

The PostgreSQL store gathers the node starts (or ends) its callers wait on at one moment
(:mod:`.batches`) and sends them as one statement over arrays, one element per write
(``unnest ... WITH ORDINALITY``): the same text whatever their number, so psycopg
prepares it once. It is the statement of :func:`taskloom.persistence.sql.runs.start_node`
(or ``end_node``) for many rows: each row's lease fence (the lease rows share-locked
first, in bytewise task order, as the one-row fence locks its own), each write guarded
by what its own row's fence allows, and one answer per row in their order, whatever the fence says
(the token found, for a start the task's state too, and the checkpoint written). Each
caller's answer is then checked by the rule's own check (``check_start``, ``check_end``):
a lost lease, an ended task or a node not running that attempt refuses that caller
alone, and its row wrote nothing.
"""

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Final

from taskloom.engine.runs import Lease, NodeEnd, NodeRun, NodeStart
from taskloom.engine.states import TERMINAL_STATES
from taskloom.persistence.postgres.arrays import TextArray, TypedArray, array_class
from taskloom.persistence.sql import rows, runs
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.script import Statement

Outcome = tuple[bool, Any]
"""``(True, checkpoint)`` or ``(False, refusal)``."""
StartPayload = tuple[Lease, NodeStart, object]
EndPayload = tuple[Lease, NodeEnd, object]

_TERMINAL: Final = TextArray(sorted(state.value for state in TERMINAL_STATES))
_START_COLUMNS: Final = (
    ("task", "text"),
    ("token", "text"),
    ("node", "text"),
    ("attempt", "int"),
    ("interruptions", "int"),
    ("interrupted", "int"),
    ("worker", "text"),
    ("now", "timestamptz"),
)
_END_COLUMNS: Final = (
    ("task", "text"),
    ("token", "text"),
    ("node", "text"),
    ("attempt", "int"),
    ("state", "text"),
    ("failed", "int"),
    ("output", "text"),
    ("error", "text"),
    ("not_before", "timestamptz"),
    ("waiting_for", "text"),
    ("interruptions", "int"),
    ("now", "timestamptz"),
    ("outcome", "text"),
)


def starts(payloads: Sequence[StartPayload]) -> Statement:
    """The statement that starts every node of *payloads* its own fence allows."""
    columns: list[TypedArray] = [array_class(kind)() for _, kind in _START_COLUMNS]
    for lease, start, now in payloads:
        row = (
            lease.task_id,
            lease.token,
            start.node,
            start.attempt,
            start.interruptions,
            start.interrupted_attempt,
            lease.worker,
            now,
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    parameters: dict[str, object] = {"e": _TERMINAL}
    parameters.update(
        (name, column) for (name, _), column in zip(_START_COLUMNS, columns, strict=True)
    )
    return Statement(_starts_sql(), parameters)


def started(payloads: Sequence[StartPayload], found: list[tuple[Any, ...]]) -> list[Outcome]:
    """Each start's answer from :func:`starts`' rows (in the payloads' order)."""
    return [
        _answer(runs.check_start, lease, row[:2], row[2:-1])
        for (lease, _, _), row in zip(payloads, found, strict=True)
    ]


def ends(payloads: Sequence[EndPayload]) -> Statement:
    """The statement that ends every node attempt of *payloads* its own fence allows and
    that is running."""
    names = [name for name, _ in _END_COLUMNS]
    columns: list[TypedArray] = [array_class(kind)() for _, kind in _END_COLUMNS]
    for lease, end, now in payloads:
        each = runs.end_parameters(POSTGRES, lease, end, now)
        for column, name in zip(columns, names, strict=True):
            column.append(each[name])
    return Statement(_ends_sql(), dict(zip(names, columns, strict=True)))


def ended(payloads: Sequence[EndPayload], found: list[tuple[Any, ...]]) -> list[Outcome]:
    """Each end's answer from :func:`ends`' rows (in the payloads' order)."""
    outcomes = []
    for (lease, end, _), row in zip(payloads, found, strict=True):
        outcome = _answer(runs.check_end, lease, row[:1], row[1:-1])
        if outcome[0] and outcome[1] is None:
            outcome = (False, runs.not_running(lease, end.node))
        outcomes.append(outcome)
    return outcomes


Check = Callable[[Lease, tuple[Any, ...] | None], None]


def _answer(
    check: Check, lease: Lease, fence: tuple[Any, ...], written: tuple[Any, ...]
) -> Outcome:
    """The rule's *check* of a row's *fence* columns, then its checkpoint (the written
    row's node columns; ``None`` if nothing was written)."""
    try:
        check(lease, fence if fence[0] is not None else None)
    except Exception as refusal:  # noqa: BLE001  # the check's refusal, this caller's answer
        return False, refusal
    checkpoint: NodeRun | None = (
        rows.node_run(POSTGRES, written) if written[0] is not None else None
    )
    return True, checkpoint


def _input(columns: tuple[tuple[str, str], ...]) -> str:
    """The rows bound as one array per column, numbered in their order (``n``)."""
    arrays = ", ".join(f"%({name})b::{kind}[]" for name, kind in columns)
    names = ", ".join(name for name, _ in columns)
    return f"i AS MATERIALIZED (SELECT * FROM unnest({arrays}) WITH ORDINALITY AS i({names}, n))"


def _fence(columns: str, source: str) -> str:
    """The lease rows of the listed tasks, share-locked in task order: bytewise
    (``COLLATE "C"``), the order in which a lease renewal and a claim lock them
    (``sql/leases.py``); in the database's collation (``en_US``: case and ``-``, ``_``
    ignored at first) a batch and a renewal of two runs would lock them crosswise."""
    return (
        f"fence AS MATERIALIZED (SELECT {columns} FROM {source}"
        " WHERE l.task_id = ANY(%(task)b::text[])"
        ' ORDER BY l.task_id COLLATE "C" FOR SHARE OF l)'
    )


@cache
def _starts_sql() -> str:
    """:func:`runs.start_node`'s writes for each row its fence allows."""
    allowed = (
        "allowed AS MATERIALIZED (SELECT i.* FROM i JOIN fence f ON f.task_id = i.task"
        " WHERE f.token = i.token AND NOT f.state = ANY(%(e)b::text[]))"
    )
    close = (
        "s0 AS (UPDATE node_attempts a SET ended_at = x.now, outcome = 'interrupted'"
        " FROM allowed x WHERE a.task_id = x.task AND a.node = x.node"
        " AND a.attempt = x.interrupted AND a.ended_at IS NULL)"
    )
    attempt = (
        "s1 AS (INSERT INTO node_attempts (task_id, node, attempt, worker, started_at)"
        " SELECT task, node, attempt, worker, now FROM allowed)"
    )
    run = (
        "written AS (INSERT INTO node_runs (task_id, node, state, attempt, interruptions,"
        " updated_at) SELECT task, node, 'running', attempt, interruptions, now FROM allowed"
        f"{runs.RESTARTED}, task_id)"
    )
    fence = _fence("l.task_id, l.token, t.state", "leases l JOIN tasks t ON t.id = l.task_id")
    clauses = ", ".join((_input(_START_COLUMNS), fence, allowed, close, attempt, run))
    return (
        f"WITH {clauses} SELECT f.token, f.state, w.* FROM i"
        " LEFT JOIN fence f ON f.task_id = i.task"
        " LEFT JOIN written w ON w.task_id = i.task AND w.node = i.node ORDER BY i.n"
    )


@cache
def _ends_sql() -> str:
    """:func:`runs.end_node`'s writes for each row its fence allows, of a node running
    that attempt."""
    allowed = (
        "allowed AS MATERIALIZED (SELECT i.* FROM i JOIN fence f"
        " ON f.task_id = i.task AND f.token = i.token)"
    )
    this_attempt = "r.task_id = x.task AND r.node = x.node AND r.attempt = x.attempt"
    attempt = (
        "s0 AS (UPDATE node_attempts r SET ended_at = x.now, outcome = x.outcome,"
        f" error = x.error FROM allowed x WHERE {this_attempt} AND EXISTS"
        f" (SELECT FROM node_runs r WHERE {this_attempt} AND r.state = 'running'))"
    )
    returned = ", ".join(f"r.{column}" for column in rows.NODE_COLUMNS.split(", "))
    run = (
        "written AS (UPDATE node_runs r SET state = x.state, failures = r.failures + x.failed,"
        " output = x.output, error = x.error, not_before = x.not_before,"
        " waiting_for = x.waiting_for, interruptions = coalesce(x.interruptions,"
        " r.interruptions), updated_at = x.now FROM allowed x"
        f" WHERE {this_attempt} AND r.state = 'running' RETURNING {returned}, r.task_id)"
    )
    fence = _fence("l.task_id, l.token", "leases l")
    clauses = ", ".join((_input(_END_COLUMNS), fence, allowed, attempt, run))
    return (
        f"WITH {clauses} SELECT f.token, w.* FROM i LEFT JOIN fence f ON f.task_id = i.task"
        " LEFT JOIN written w ON w.task_id = i.task AND w.node = i.node ORDER BY i.n"
    )
