"""The one mapping from a stored task to the status each protocol generation shows.

The engine has more states than the wire: a queued task (created, waiting for a worker)
and a running one are both ``working`` to a requestor. And the two generations read a
failure differently (ADR 0010): the engine stores one outcome, a :class:`TaskFailure`,
which is either a *tool error* (a node failed, the requestor declined...: the call
answers a ``CallToolResult`` with ``isError``) or a *server fault* (the server could not
produce a valid answer: the call answers a JSON-RPC error). 2025-11-25 shows both as
``failed``; 2026-07-28 shows a tool error as ``completed`` (its result inlined) and only
a server fault as ``failed`` (its error inlined).
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from taskloom.engine.models import Task, TaskFailure
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

SERVER_FAULT_CODES: Final = frozenset({"invalid_output", "version_mismatch"})
"""Failure codes that are the server's fault, not a result of the tool: the workflow's
result broke its own output schema, or this process cannot resume the run."""


def wire_status(state: TaskState) -> WireStatus:
    """The status a 2025-11-25 requestor sees for an engine *state*."""
    return WIRE_STATUS[state]


def is_server_fault(failure: TaskFailure | None) -> bool:
    """True when a failed task's call answers a JSON-RPC error rather than a tool error."""
    return failure is not None and failure.code in SERVER_FAULT_CODES


def modern_status(task: Task) -> WireStatus:
    """The status a 2026-07-28 requestor sees: a tool error is ``completed``."""
    if task.state is TaskState.FAILED and not is_server_fault(task.error):
        return "completed"
    return WIRE_STATUS[task.state]
