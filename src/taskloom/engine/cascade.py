"""Writing a task, with what a write sets off: the one rule every store executes.

A write stores ``mutate(current)`` (a checked successor) with its history row; a fenced
write that ends the run drops the lease and closes the attempts no worker will end
(see :class:`taskloom.engine.runs.RunStore`); a fenced write that parks the run drops the
lease (ADR 0021); a task that ends records its end on its parent and cancels its
children that have not ended, each such write cascading in turn (ADR 0026).

The rule is a generator of :data:`Effect` requests; a store executes each one in the
transaction of the write (:func:`execute` in memory; the SQL stores :func:`translate`
it into statements, ``taskloom.persistence.sql.tasks``) and sends back what a read
returns.
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
_Y = TypeVar("_Y")
_S = TypeVar("_S")


@dataclass(frozen=True)
class Put:
    """Write *after* over *before* (its stored version) and append its history row."""

    before: Task
    after: Task


@dataclass(frozen=True)
class Drop:
    """Drop *lease* (if it is still the task's); with *ends_run*, also close its run's
    open attempts (interrupted; a running node becomes ``retrying`` with one more
    interruption: :func:`taskloom.engine.runs.node_interrupted`)."""

    lease: Lease
    ends_run: bool


@dataclass(frozen=True)
class Read:
    """Answer with live tasks held for a write: the task *task_id* (``None`` if none), or
    with *children*, a list of its children that have not ended."""

    task_id: TaskId
    children: bool = False


Effect = Put | Drop | Read
Answer = Task | None | list[Task]
Rule = Generator[Effect, Answer, _T]


def write(current: Task, mutate: TaskMutation, fence: Lease | None, now: datetime) -> Rule[Task]:
    """Store ``mutate(current)`` and what it sets off; *current* was read in this
    transaction, held against other writers (ADR 0032). Returns the new task. Every
    effect is at *now*.

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
        yield Drop(fence, ends_run=True)
    elif fence is not None and new.parked:  # the run waits: no worker holds it (ADR 0021)
        yield Drop(fence, ends_run=False)
    if new.is_terminal and not current.is_terminal:
        yield from _relatives_of_ended(new, now)
    return new


def _relatives_of_ended(task: Task, now: datetime) -> Rule[None]:
    """Record *task*'s end on its parent and cancel its children that have not ended,
    in the transaction that ends it (ADR 0026); each such cancel recurses."""
    if task.parent_id is not None:
        parent = yield Read(task.parent_id)
        assert parent is None or isinstance(parent, Task)
        recorded = record_child_end(parent, task, now) if parent is not None else None
        if parent is not None and recorded is not None:
            yield from write(parent, _to(recorded), None, now)
    children = yield Read(task.id, children=True)
    assert isinstance(children, list)
    for child in children:
        yield from write(child, partial(cancel_for_parent, parent=task, now=now), None, now)


def _to(task: Task) -> TaskMutation:
    return lambda _: task


def translate(
    rule: Rule[_T], handle: Callable[[Effect], Generator[_Y, _S, Answer]]
) -> Generator[_Y, _S, _T]:
    """*rule* with each effect executed by the generator *handle* returns (a store that
    talks to a database yields its statements through)."""
    answer: Answer = None
    while True:
        try:
            effect = rule.send(answer)
        except StopIteration as stop:
            value: _T = stop.value
            return value
        answer = yield from handle(effect)


def execute(rule: Rule[_T], answer: Callable[[Effect], Answer]) -> _T:
    """Run *rule* to its end, *answer* executing each effect at once (no I/O)."""
    try:
        next(translate(rule, partial(_at_once, answer)))
    except StopIteration as stop:
        value: _T = stop.value
        return value
    raise AssertionError("an effect executed at once yields nothing")


def _at_once(answer: Callable[[Effect], Answer], effect: Effect) -> Generator[None, None, Answer]:
    reply = answer(effect)
    yield from ()
    return reply
