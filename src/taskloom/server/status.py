"""The one mapping from engine task states to wire statuses.

The engine has more states than the wire: a queued task (created, waiting for a worker)
and a running one are both ``working`` to a requestor. Every wire view (2025-11-25
today, the 2026-07-28 extension later) takes its status from here.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from taskloom.engine.states import TaskState

WireStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]

WIRE_STATUS: Final[Mapping[TaskState, WireStatus]] = MappingProxyType(
    {
        TaskState.QUEUED: "working",
        TaskState.RUNNING: "working",
        TaskState.INPUT_REQUIRED: "input_required",
        TaskState.COMPLETED: "completed",
        TaskState.FAILED: "failed",
        TaskState.CANCELLED: "cancelled",
    }
)


def wire_status(state: TaskState) -> WireStatus:
    """The status a requestor sees for an engine *state*."""
    return WIRE_STATUS[state]
