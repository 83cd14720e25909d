"""Task states and the one transition table that governs them."""

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from taskloom.engine.errors import IllegalTransitionError


class TaskState(StrEnum):
    """Where a task is in its life. Stored by value; mapped to wire names by the server."""

    QUEUED = "queued"
    """Durably created, waiting for a worker (wire: ``working``)."""
    RUNNING = "running"
    """A worker is executing it (wire: ``working``)."""
    INPUT_REQUIRED = "input_required"
    """Waiting for an answer from the requestor (wire: ``input_required``)."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TRANSITIONS: Final[Mapping[TaskState, frozenset[TaskState]]] = MappingProxyType(
    {
        TaskState.QUEUED: frozenset({TaskState.RUNNING, TaskState.FAILED, TaskState.CANCELLED}),
        TaskState.RUNNING: frozenset(
            {
                TaskState.QUEUED,  # a retry wait, or a lease reclaimed after a crash
                TaskState.INPUT_REQUIRED,
                TaskState.COMPLETED,
                TaskState.FAILED,
                TaskState.CANCELLED,
            }
        ),
        TaskState.INPUT_REQUIRED: frozenset(
            {
                TaskState.RUNNING,  # the answer arrived; the asking node continues
                TaskState.QUEUED,  # the answer arrived after the asking worker died
                TaskState.FAILED,
                TaskState.CANCELLED,
            }
        ),
        TaskState.COMPLETED: frozenset(),
        TaskState.FAILED: frozenset(),
        TaskState.CANCELLED: frozenset(),
    }
)
"""The only source of truth for legal moves. Terminal states have no exits."""

TERMINAL_STATES: Final[frozenset[TaskState]] = frozenset(
    state for state, targets in TRANSITIONS.items() if not targets
)
ACTIVE_STATES: Final[frozenset[TaskState]] = frozenset(TaskState) - TERMINAL_STATES


def is_terminal(state: TaskState) -> bool:
    """True when no transition leaves *state*."""
    return state in TERMINAL_STATES


def check_transition(task_id: str, current: TaskState, target: TaskState) -> None:
    """Raise :class:`IllegalTransitionError` unless *current* may move to *target*."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransitionError(task_id=task_id, current=current, target=target)
