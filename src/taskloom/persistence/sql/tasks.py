"""Task transactions both SQL stores run: reads, and every write through the one rule of
:mod:`taskloom.engine.cascade`, whose effects are executed here as statements."""

from collections.abc import Mapping
from datetime import datetime
from functools import cache, partial
from typing import Any, TypeVar

from taskloom.engine import cascade
from taskloom.engine.errors import TaskNotFoundError, TaskStateError
from taskloom.engine.models import Task, TaskId, TaskMutation
from taskloom.engine.runs import Lease, NodeEnd, NodeRun
from taskloom.engine.states import TERMINAL_STATES
from taskloom.engine.versions import RunMove, running_now
from taskloom.persistence.sql import history, rows, runs
from taskloom.persistence.sql.dialect import Dialect, is_in
from taskloom.persistence.sql.script import Result, Script, Statement, ask

_T = TypeVar("_T")


def get(d: Dialect, task_id: TaskId, now: datetime, *, lock: bool = False) -> Script[Task | None]:
    """The live task *task_id*, or ``None``; with *lock*, held for this transaction's write."""
    found = yield Statement(_get_sql(d, lock), {"id": task_id, "now": d.time(now)})
    row = found.one()
    return rows.task_from_body(row[0]) if row is not None else None


@cache
def _get_sql(d: Dialect, lock: bool) -> str:
    return f"SELECT body FROM tasks WHERE id = {d.parameter('id')} AND {rows.live(d)}" + (
        d.row_lock if lock else ""
    )


def current(d: Dialect, task_id: TaskId, now: datetime) -> Script[Task]:
    """The live task *task_id*, held for this transaction's write (writers queue here).

    Raises:
        TaskNotFoundError: no live task has this id.
    """
    task = yield from get(d, task_id, now, lock=True)
    if task is None:
        raise TaskNotFoundError(task_id)
    return task


def key_holder(d: Dialect, task: Task, now: datetime) -> Script[Task | None]:
    """The live task of *task*'s owner holding its idempotency key, or ``None``: an
    expired holder is deleted (it frees the key), a missing one is left missing."""
    p = d.parameter
    found = yield from ask(
        Statement(
            f"SELECT {d.position}, expires_at, body FROM tasks"
            f" WHERE coalesce(owner, '') = {p('owner')} AND idempotency_key = {p('key')}"
            f"{d.delete_lock}",
            {"owner": task.owner or "", "key": task.idempotency_key},
        )
    )
    holder = found.one()
    if holder is None:
        return None
    position, expires_at, body = holder
    if expires_at is None or d.moment(expires_at) > now:
        return rows.task_from_body(body)
    yield Statement(
        f"DELETE FROM tasks WHERE {d.position} = {p('position')}", {"position": position}
    )
    return None


def put(d: Dialect, before: Task | None, after: Task) -> Script[None]:
    """Write *after* over its row, with its history row (one round trip where the
    dialect fuses writes)."""
    written = rows.update(d, after)
    added = history.insert(d, before, after)
    yield written if added is None else (written, added)


def write(
    d: Dialect, task: Task, mutate: TaskMutation, fence: Lease | None, now: datetime
) -> Script[Task]:
    """:func:`taskloom.engine.cascade.write`: store ``mutate(task)`` and what it sets off.
    *task* was read in this transaction with :func:`current` (ADR 0032).

    The writes whose results nothing reads (a task's row and history, a lease dropped)
    are held and sent with the next read of children, or at the end: one round trip
    where the dialect fuses writes (ADR 0050). A read of one task sends them first, so
    it sees them."""
    held: list[Statement] = []
    rule = cascade.write(task, mutate, fence, now)
    written = yield from cascade.translate(rule, partial(_effect, d, now, held))
    if held:
        yield tuple(held)
    return written


def update(
    d: Dialect, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None
) -> Script[Task]:
    """See :meth:`taskloom.engine.ports.TaskStore.update`."""
    task = yield from current(d, task_id, now)
    if fence is not None:
        yield from runs.check_fence(d, fence)
    return (yield from write(d, task, mutate, fence, now))


def finish_run(
    d: Dialect, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
) -> Script[tuple[NodeRun, Task]]:
    """See :meth:`taskloom.engine.runs.RunStore.finish_run`: the task row is held before
    the lease's; a refusal of either part undoes both."""
    task = yield from current(d, lease.task_id, now)
    run = yield from runs.end_node(d, lease, end, d.time(now))  # checks the fence
    return run, (yield from write(d, task, mutate, lease, now))


def move_run(d: Dialect, task_id: TaskId, now: datetime, move: RunMove) -> Script[Task]:
    """See :meth:`taskloom.engine.versions.VersionStore.move_run`."""
    task = yield from current(d, task_id, now)  # a claim's lease waits for this row
    p = d.parameter
    holder = yield from ask(
        Statement(
            f"SELECT worker FROM leases WHERE task_id = {p('id')} AND expires_at > {p('now')}",
            {"id": task_id, "now": d.time(now)},
        )
    )
    row = holder.one()
    if row is not None:
        raise TaskStateError(running_now(task_id, row[0]))
    nodes = yield from runs.node_runs(d, task_id)
    moved = yield from write(d, task, lambda each: move(each, nodes), None, now)
    yield Statement(
        f"UPDATE tasks SET workflow_version = {p('version')} WHERE id = {p('id')}",
        {"version": moved.workflow_version, "id": task_id},
    )
    return moved


def _effect(
    d: Dialect, now: datetime, held: list[Statement], effect: cascade.Effect
) -> Script[cascade.Answer]:
    """Execute one effect of the cascade as statements; writes are added to *held*."""
    match effect:
        case cascade.Put(before, after):
            _hold(put(d, before, after), held)
        case cascade.Drop(lease, ends_run=True):
            _hold(runs.end_run(d, lease, d.time(now)), held)
        case cascade.Drop(lease):
            _hold(runs.release_lease(d, lease), held)
        case cascade.Read(task_id, children=False):
            if held:  # the row may be one of them: they go first
                yield tuple(held)
                held.clear()
            return (yield from get(d, task_id, now, lock=True))
        case cascade.Read(task_id):
            return (yield from _after(held, _open_children(d, task_id, now)))
    return None


def before(writes: Script[None] | None, read: Script[_T]) -> Script[_T]:
    """*read*, its first query sent with *writes* (statements whose results nothing
    reads) in one round trip where they can be fused, else after them."""
    held: list[Statement] = []
    if writes is not None:
        _hold(writes, held)
    return (yield from _after(held, read))


def _hold(script: Script[None], held: list[Statement]) -> None:
    """Add the statements of *script*, a write that reads no result, to *held*."""
    try:
        query = next(script)
        while True:
            held.extend(query if isinstance(query, tuple) else (query,))
            query = script.send(Result())
    except StopIteration:
        return


def _after(held: list[Statement], script: Script[_T]) -> Script[_T]:
    """*script*, its first query sent together with the *held* writes when they can be
    fused (named parameters that agree, no ``WITH`` of their own), else after them."""
    if not held:
        return (yield from script)
    pending = tuple(held)
    held.clear()
    try:
        query = next(script)
    except StopIteration as stop:
        yield pending
        value: _T = stop.value
        return value
    together = pending + (query if isinstance(query, tuple) else (query,))
    if _fusable(together):
        result = yield together
    else:
        yield pending
        result = yield query
    while True:
        try:
            query = script.send(result)
        except StopIteration as stop:
            value = stop.value
            return value
        result = yield query


def _fusable(statements: tuple[Statement, ...]) -> bool:
    """Whether :func:`taskloom.persistence.sql.script.fused` can join *statements*."""
    bound: dict[str, Any] = {}
    for statement in statements:
        if not isinstance(statement.parameters, Mapping) or statement.text.startswith("WITH"):
            return False
        for name, value in statement.parameters.items():
            if bound.setdefault(name, value) != value:
                return False
    return True


def _open_children(d: Dialect, task_id: TaskId, now: datetime) -> Script[list[Task]]:
    """Held in id order: rows are locked parent before child here and child before parent
    by a child's end; a deadlock between the two is broken by the database and the loser
    retried (a transient error)."""
    sql, ended = _open_children_sql(d)
    found = yield Statement(sql, {"parent": task_id, "now": d.time(now), "s": ended})
    return [rows.task_from_body(body) for (body,) in found.rows]


@cache
def _open_children_sql(d: Dialect) -> tuple[str, Any]:
    """The read of :func:`_open_children` and the value of its parameter ``s``."""
    parameters: dict[str, Any] = {}
    ended = is_in(d, "state", "s", sorted(state.value for state in TERMINAL_STATES), parameters)
    sql = (
        f"SELECT body FROM tasks WHERE parent_id = {d.parameter('parent')}"
        f" AND {rows.live(d)} AND NOT {ended} ORDER BY id{d.row_lock}"
    )
    return sql, parameters["s"]
