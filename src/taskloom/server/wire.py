"""The wire shapes of both generations: statuses, Task objects, results and the errors
a finished task answers with.

Everything is a plain dict: the SDK dumps pydantic results with ``exclude_none``, which
would drop the ``ttl``/``ttlMs: null`` the schemas require when retention is unlimited.

- **Status.** The engine has more states than the wire: a queued task and a running one
  are both ``working``. The two generations read a failure differently (ADR 0010): the
  engine stores one :class:`TaskFailure`, either a *tool error* (a node failed, the
  requestor declined...: the call answers a ``CallToolResult`` with ``isError``) or a
  *server fault* (the server could not produce a valid answer: a JSON-RPC error).
  2025-11-25 shows both as ``failed``; 2026-07-28 shows a tool error as ``completed``
  (its result inlined) and only a server fault as ``failed`` (its error inlined).
- **2025-11-25** names (``ttl``, ``pollInterval``): the flat Task of ``tasks/get``,
  ``tasks/cancel`` and status notifications; nested under ``task`` in
  ``CreateTaskResult``.
- **2026-07-28** names (``ttlMs``, ``pollIntervalMs``): a flat ``CreateTaskResult``
  with ``resultType: "task"``, and the DetailedTask of ``tasks/get``. No payload carries
  ``requestState`` or related-task ``_meta``.
- **Children** (ADR 0026): the Task of a child workflow, on both generations, names its
  parent in ``_meta["io.taskloom/parentTaskId"]`` (a key in taskloom's own namespace; a
  task with no parent has no ``_meta``).
- **Results** (ADR 0008): a terminal task's ``CallToolResult``, the same for a plain
  call, ``tasks/result`` and the inlined 2026 result; a cancelled task has none.
"""

import json
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, Literal

from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from taskloom.engine.models import InputRequest, Task, TaskFailure
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
RELATED_TASK_META_KEY: Final = "io.modelcontextprotocol/related-task"
"""``_meta`` key tying a message to a task: ``{"taskId": ...}``."""
ELICITATION_METHOD: Final = "elicitation/create"
PARENT_TASK_META_KEY: Final = "io.taskloom/parentTaskId"
"""``_meta`` key of a child task's Task object: the id of the task that started it."""


# -- status -------------------------------------------------------------------------


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


def timestamp(moment: datetime) -> str:
    """ISO-8601 in UTC with microseconds and a ``Z`` suffix (one width, so the strings
    sort as the times do)."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- 2025-11-25 ---------------------------------------------------------------------


def tasks_capability() -> dict[str, dict[str, object]]:
    """``capabilities.tasks`` announced on a 2025-11-25 connection (a fresh dict)."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def related_task_meta(task_id: str) -> dict[str, dict[str, str]]:
    """The related-task ``_meta`` entry for *task_id*."""
    return {RELATED_TASK_META_KEY: {"taskId": task_id}}


def legacy_task(task: Task) -> dict[str, Any]:
    """The flat Task object of ``tasks/get``, ``tasks/cancel`` and status notifications."""
    return _task_object(task, wire_status(task.state), ttl="ttl", poll="pollInterval")


def legacy_create_task_result(task: Task) -> dict[str, Any]:
    """The ``CreateTaskResult`` of a task-augmented ``tools/call``: the task, nested."""
    return {"task": legacy_task(task)}


def task_page(tasks: tuple[Task, ...], next_cursor: str | None) -> dict[str, Any]:
    """The ``tasks/list`` result: a page of tasks and, when more remain, ``nextCursor``."""
    page: dict[str, Any] = {"tasks": [legacy_task(task) for task in tasks]}
    if next_cursor is not None:
        page["nextCursor"] = next_cursor
    return page


# -- 2026-07-28 ---------------------------------------------------------------------


def modern_task(task: Task) -> dict[str, Any]:
    """The Task fields shared by ``CreateTaskResult`` and ``tasks/get``."""
    return _task_object(task, modern_status(task), ttl="ttlMs", poll="pollIntervalMs")


def _task_object(task: Task, status: str, *, ttl: str, poll: str) -> dict[str, Any]:
    """The Task object both generations share, with their *status*, and their names
    for the time to live (*ttl*) and the poll interval (*poll*)."""
    wire: dict[str, Any] = {
        "taskId": task.id,
        "status": status,
        "createdAt": timestamp(task.created_at),
        "lastUpdatedAt": timestamp(task.updated_at),
        ttl: task.ttl_ms,
    }
    if task.status_message is not None:
        wire["statusMessage"] = task.status_message
    if task.poll_interval_ms is not None:
        wire[poll] = task.poll_interval_ms
    return _with_parent(wire, task)


def _with_parent(wire: dict[str, Any], task: Task) -> dict[str, Any]:
    """*wire* with the parent link of a child task in its ``_meta``."""
    if task.parent_id is not None:
        wire["_meta"] = {PARENT_TASK_META_KEY: task.parent_id}
    return wire


def modern_create_task_result(task: Task) -> dict[str, Any]:
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


# -- results ------------------------------------------------------------------------


def call_tool_result(task: Task) -> dict[str, Any]:
    """The result a terminal *task*'s tool call answers with.

    - completed: the workflow's result as text (:func:`result_text`), and as
      ``structuredContent`` when it is a JSON object (always the case for a workflow
      with an output model);
    - failed: ``isError: true`` with the failure's message (a tool execution error, which
      the model can read and act on), unless the failure is the server's fault;
    - cancelled: no result at all.

    Raises:
        MCPError: the task was cancelled (it has no result), or failed through the
            server's fault.
        ValueError: the task has not finished (a programming error).
    """
    match task.state:
        case TaskState.COMPLETED:
            result: dict[str, Any] = {
                "content": [text_content(result_text(task.result))],
                "isError": False,
            }
            if isinstance(task.result, dict):
                result["structuredContent"] = task.result
            return result
        case TaskState.FAILED:
            if is_server_fault(task.error):
                raise server_fault(task)
            message = task.error.message if task.error is not None else "the task failed"
            return {"content": [text_content(message)], "isError": True}
        case TaskState.CANCELLED:
            raise cancelled_without_result(task)
        case _:
            raise ValueError(f"task {task.id} has no result yet: it is {task.state}")


def result_text(result: object) -> str:
    """A string result as itself, for the model to read (ADR 0019); anything else as
    compact JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def text_content(text: str) -> dict[str, str]:
    """A text content block."""
    return {"type": "text", "text": text}


def invalid_arguments_result(message: str) -> dict[str, Any]:
    """A plain call whose arguments do not fit the tool: a tool error the model can fix."""
    return {"content": [text_content(message)], "isError": True}


def cancelled_without_result(task: Task) -> MCPError:
    """What ``tasks/result`` (or a plain call) answers for a cancelled task (ADR 0008)."""
    reason = f": {task.status_message}" if task.status_message else ""
    return MCPError(
        INTERNAL_ERROR,
        f"Task {task.id} was cancelled{reason}; it has no result",
        {"taskId": task.id, "status": "cancelled"},
    )


def server_fault(task: Task) -> MCPError:
    """What a task that failed through the server's fault answers (ADR 0010)."""
    code = task.error.code if task.error is not None else "unknown"
    message = task.error.message if task.error is not None else "the task failed"
    return MCPError(
        INTERNAL_ERROR,
        f"Task {task.id} failed: {message}",
        {"taskId": task.id, "status": "failed", "reason": code},
    )
