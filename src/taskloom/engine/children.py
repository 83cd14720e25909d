"""Child workflows: a node starts another workflow as a task of its own (ADR 0026).

``await ctx.child(workflow, arguments)`` creates the child task (same owner and retention
as its parent, ``parent_id`` set) under an idempotency key made of the parent's id and
the call's key, so a node that runs again (after a wait, a crash) finds the same child
instead of starting a second one. While the child runs, the parent's node waits durably
for ``child:<task id>`` (ADR 0021): the parent's run parks and holds nothing.

Two rules tie the two tasks together, and every store applies them **in the transaction
that ends a task**, whoever ends it (a worker, a cancel, any process):

- :func:`record_child_end`: a child's end is recorded on its live parent
  (``Task.ended_children``), and a parked parent becomes claimable (``wake_at``).
- :func:`cancel_for_parent`: a task's end cancels its children that have not ended,
  and theirs in turn (each such cancel is a task end, so the rule recurses).
"""

import hashlib
from datetime import datetime, timedelta
from typing import Final

from pydantic import JsonValue

from taskloom.engine.models import MAX_KEY_LENGTH, Task, TaskFailure
from taskloom.engine.states import TaskState

_ONE_MICROSECOND: Final = timedelta(microseconds=1)
_KEY_PREFIX: Final = "taskloom.child:"


class ChildFailedError(Exception):
    """Raised in a node by ``ctx.child`` when the child task failed or was cancelled.

    A node failure like any other: the node's retry policy sees it (a retry starts a new
    child), and the parent fails with its message unless the node catches it.
    """

    def __init__(
        self, *, child_id: str, workflow: str, state: str, error: TaskFailure | None
    ) -> None:
        reason = f"{error.code}: {error.message}" if error is not None else state
        super().__init__(f"child task {child_id} ({workflow}) {state}: {reason}")
        self.child_id = child_id
        self.workflow = workflow
        self.state = state
        """``failed`` or ``cancelled``."""
        self.error = error
        """The child's failure as stored (``None`` for a cancel)."""


def child_idempotency_key(parent_id: str, call_key: str) -> str:
    """The idempotency key of the child a parent's call (*call_key*) starts: one child
    per call, whatever number of times the node runs."""
    key = f"{_KEY_PREFIX}{parent_id}:{call_key}"
    if len(key) <= MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha256(call_key.encode()).hexdigest()
    return f"{_KEY_PREFIX}{parent_id}:sha256:{digest}"


def record_child_end(parent: Task, child: Task, now: datetime) -> Task | None:
    """*parent* after its child *child* ended, or ``None`` if nothing changes (the
    parent ended already, or knows)."""
    if parent.is_terminal or child.id in parent.ended_children:
        return None
    changes: dict[str, object] = {"ended_children": [*parent.ended_children, child.id]}
    if parent.parked:  # no worker holds the run: make it claimable now (as an answer does)
        changes["wake_at"] = now if parent.wake_at is None else min(parent.wake_at, now)
    return _next(parent, now, changes)


def cancel_for_parent(child: Task, parent: Task, now: datetime) -> Task:
    """*child*, cancelled because *parent* ended."""
    return _next(
        child,
        now,
        {
            "state": TaskState.CANCELLED,
            "status_message": f"cancelled: its parent task {parent.id} is {parent.state}",
            "input_requests": {},
            "parked": False,
            "wake_at": None,
        },
    )


def child_result(child: Task) -> JsonValue:
    """The result of an ended child.

    Raises:
        ChildFailedError: the child failed or was cancelled.
    """
    if child.state is TaskState.COMPLETED:
        return child.result
    raise ChildFailedError(
        child_id=child.id, workflow=child.name, state=child.state.value, error=child.error
    )


def _next(task: Task, now: datetime, changes: dict[str, object]) -> Task:
    updated_at = max(now, task.updated_at + _ONE_MICROSECOND)
    return task.model_copy(
        update={**changes, "updated_at": updated_at, "version": task.version + 1}
    )
