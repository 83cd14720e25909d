"""Writing a task, with what a write sets off: the one rule every store executes.

A write stores ``mutate(current)`` (a checked successor) with its history row; a fenced
write that ends the run drops the lease and closes the attempts no worker will end
(see :class:`taskloom.engine.runs.RunStore`); a fenced write that parks the run drops the
lease (ADR 0021); a task that ends records its end on its parent and cancels its
children that have not ended, each such write cascading in turn (ADR 0026).

The rule is a generator of :data:`Effect` requests; a store executes each one in the
transaction of the write (:func:`execute` in memory; the SQL stores through
``taskloom.persistence.sql.tasks``) and sends back what a read returns.
"""

from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TypeVar

from taskloom.engine.children import cancel_for_parent, record_child_end
from taskloom.engine.models import Task, TaskId, TaskMutation, ensure_successor
from taskloom.engine.runs import Lease

_T = TypeVar("_T")


@dataclass(frozen=True)
class Put:
    """Write *after* over *before* (its stored version) and append its history row."""

    before: Task
    after: Task


@dataclass(frozen=True)
class EndRun:
    """Drop *lease* and close its run's open attempts (interrupted; a running node
    becomes ``retrying`` with one more interruption)."""

    lease: Lease
    now: datetime


@dataclass(frozen=True)
class Release:
    """Drop *lease* (if it is still the task's)."""

    lease: Lease


@dataclass(frozen=True)
class ReadParent:
    """Answer with the live task *task_id* (``None`` if none), held for a write."""

    task_id: TaskId
    now: datetime


@dataclass(frozen=True)
class OpenChildren:
    """Answer with the live children of *task_id* that have not ended, held for writes."""

    task_id: TaskId
    now: datetime


Effect = Put | EndRun | Release | ReadParent | OpenChildren
Answer = Task | None | list[Task]
Rule = Generator[Effect, Answer, _T]


def write(current: Task, mutate: TaskMutation, fence: Lease | None, now: datetime) -> Rule[Task]:
    """Store ``mutate(current)`` and what it sets off; *current* was read in this
    transaction, held against other writers (ADR 0032). Returns the new task.

    Raises:
        TaskloomError: whatever *mutate* raised (nothing is requested then).
    """
    new = mutate(current)
    ensure_successor(current, new)
    yield Put(current, new)
    if fence is not None and new.is_terminal:
        # The run ends with its result: a worker killed before it released the lease
        # must not leave the row behind (claims never look at ended tasks again), nor
        # attempts open that no worker will end.
        yield EndRun(fence, now)
    elif fence is not None and new.parked:  # the run waits: no worker holds it (ADR 0021)
        yield Release(fence)
    if new.is_terminal and not current.is_terminal:
        yield from _relatives_of_ended(new, now)
    return new


def _relatives_of_ended(task: Task, now: datetime) -> Rule[None]:
    """Record *task*'s end on its parent and cancel its children that have not ended,
    in the transaction that ends it (ADR 0026); each such cancel recurses."""
    if task.parent_id is not None:
        parent = yield ReadParent(task.parent_id, now)
        assert parent is None or isinstance(parent, Task)
        recorded = record_child_end(parent, task, now) if parent is not None else None
        if parent is not None and recorded is not None:
            yield from write(parent, _to(recorded), None, now)
    children = yield OpenChildren(task.id, now)
    assert isinstance(children, list)
    for child in children:
        yield from write(child, partial(cancel_for_parent, parent=task, now=now), None, now)


def _to(task: Task) -> TaskMutation:
    return lambda _: task


def execute(rule: Rule[_T], answer: Callable[[Effect], Answer]) -> _T:
    """Run *rule* to its end, *answer* executing each effect (a store with no I/O)."""
    reply: Answer = None
    while True:
        try:
            effect = rule.send(reply)
        except StopIteration as stop:
            value: _T = stop.value
            return value
        reply = answer(effect)
