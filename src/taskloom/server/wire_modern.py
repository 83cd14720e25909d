"""Engine tasks in the 2026-07-28 wire shape of the tasks extension (SEP-2663).

Plain dicts, like the 2025-11-25 shapes (``"ttlMs": null`` must survive the SDK's
``exclude_none``). Field names are the 2026 ones (``ttlMs``, ``pollIntervalMs``); the
status comes from :func:`taskloom.server.status.modern_status`, so a tool error is
``completed`` here. No payload carries ``requestState`` or related-task ``_meta``.
"""

from typing import Any

from taskloom.engine.models import InputRequest, Task
from taskloom.server.errors import server_fault
from taskloom.server.results import call_tool_result
from taskloom.server.status import modern_status
from taskloom.server.wire_legacy import timestamp

ELICITATION_METHOD = "elicitation/create"


def modern_task(task: Task) -> dict[str, Any]:
    """The Task fields shared by ``CreateTaskResult`` and ``tasks/get``."""
    wire: dict[str, Any] = {
        "taskId": task.id,
        "status": modern_status(task),
        "createdAt": timestamp(task.created_at),
        "lastUpdatedAt": timestamp(task.updated_at),
        "ttlMs": task.ttl_ms,
    }
    if task.status_message is not None:
        wire["statusMessage"] = task.status_message
    if task.poll_interval_ms is not None:
        wire["pollIntervalMs"] = task.poll_interval_ms
    return wire


def create_task_result(task: Task) -> dict[str, Any]:
    """The flat ``CreateTaskResult`` a server-directed ``tools/call`` answers with."""
    return {"resultType": "task", **modern_task(task)}


def detailed_task(task: Task) -> dict[str, Any]:
    """The ``tasks/get`` result: the task plus what its status carries (the tool's
    result, the JSON-RPC error, or every outstanding input request)."""
    wire = {"resultType": "complete", **modern_task(task)}
    match wire["status"]:
        case "input_required":
            wire["inputRequests"] = {
                key: input_request(question) for key, question in task.input_requests.items()
            }
        case "completed":
            wire["result"] = call_tool_result(task)
        case "failed":  # only a server fault is failed here: its JSON-RPC error
            wire["error"] = server_fault(task).error.model_dump(mode="json", exclude_none=True)
    return wire


def input_request(question: InputRequest) -> dict[str, Any]:
    """A question the task waits on, as the ``elicitation/create`` request it stands for."""
    return {
        "method": ELICITATION_METHOD,
        "params": {
            "mode": "form",
            "message": question.message,
            "requestedSchema": question.requested_schema,
        },
    }
