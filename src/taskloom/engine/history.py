"""The stored history of a task's state and status message (ADR 0036).

Every store writes a :class:`HistoryEntry` in the transaction that writes the task it
describes, so the history can never disagree with the task. :func:`entry_for` is the one
rule of what counts as a change and what caused it; stores only apply it:

- a task's creation, and every change of its state, is always recorded;
- a change of the status message alone (progress text) is recorded only while the task
  has fewer than :data:`MAX_STATUS_ROWS` such rows: a task that reports progress on every
  tick writes a bounded history, and its latest text is on the task itself.
"""

from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict

from taskloom.engine.models import Task, TaskId, UtcDatetime
from taskloom.engine.states import TaskState

MAX_STATUS_ROWS: Final = 50
"""How many status-message-only rows one task keeps (state changes are always kept)."""


class Cause(StrEnum):
    """What moved the task, as the difference between its two versions tells."""

    CREATED = "created"
    CLAIMED = "claimed"
    """A worker took the run (from ``queued``, or a parked run woke)."""
    REQUEUED = "requeued"
    """Back to ``queued``: a retry's wait, a durable wait, or a lease reclaimed."""
    QUESTION = "question"
    ANSWER = "answer"
    PROGRESS = "progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UPGRADED = "upgraded"
    """An operator moved the run to another version of its workflow (ADR 0039)."""
    MIGRATED = "migrated"
    """The state the task had when its database gained a history (schema 7); its earlier
    changes were never recorded."""


class HistoryEntry(BaseModel):
    """One recorded change of a task: its state and status message from this version on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: TaskId
    version: int
    """The task's version this change produced (unique per task, orders the rows)."""
    at: UtcDatetime
    state: TaskState
    status_message: str | None
    cause: Cause
    state_changed: bool
    """``False`` for a status-message-only row (the ones :data:`MAX_STATUS_ROWS` caps)."""


def entry_for(before: Task | None, after: Task) -> HistoryEntry | None:
    """The row that writing *after* over *before* (``None`` at creation) adds, or ``None``
    when neither the state nor the status message changed. A status-only row is subject
    to :data:`MAX_STATUS_ROWS`, which the store checks against what it holds."""
    if before is not None and (
        before.state is after.state and before.status_message == after.status_message
    ):
        return None
    return HistoryEntry.model_construct(  # from a validated task: nothing to check again
        task_id=after.id,
        version=after.version,
        at=after.updated_at,
        state=after.state,
        status_message=after.status_message,
        cause=_cause(before, after),
        state_changed=before is None or before.state is not after.state,
    )


def _cause(before: Task | None, after: Task) -> Cause:
    if before is None:
        return Cause.CREATED
    ending = {
        TaskState.COMPLETED: Cause.COMPLETED,
        TaskState.FAILED: Cause.FAILED,
        TaskState.CANCELLED: Cause.CANCELLED,
    }
    if after.state in ending:
        return ending[after.state]
    if after.workflow_version != before.workflow_version:
        return Cause.UPGRADED
    if len(after.input_responses) > len(before.input_responses):
        return Cause.ANSWER
    if after.state is TaskState.INPUT_REQUIRED and before.state is not after.state:
        return Cause.QUESTION
    if after.state is TaskState.RUNNING and before.state is not after.state:
        return Cause.CLAIMED
    if after.state is TaskState.QUEUED and before.state is not after.state:
        return Cause.REQUEUED
    return Cause.PROGRESS
