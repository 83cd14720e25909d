"""The ``CallToolResult`` of a finished task: the same for a plain call and ``tasks/result``.

- completed: the workflow's result as text (a string result as itself, anything else as
  JSON; ADR 0019), and as ``structuredContent`` when it is a JSON object (always the
  case for a workflow with an output model);
- failed: ``isError: true`` with the failure's message (a tool execution error, which
  the model can read and act on), unless the failure is the server's fault (ADR 0010):
  then a JSON-RPC error ``-32603``;
- cancelled: no result at all, a JSON-RPC error (ADR 0008).
"""

import json
from typing import Any

from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.server.errors import cancelled_without_result, server_fault
from taskloom.server.status import is_server_fault


def call_tool_result(task: Task) -> dict[str, Any]:
    """The result a terminal *task*'s tool call answers with.

    Raises:
        MCPError: the task was cancelled (it has no result), or failed through the
            server's fault.
        ValueError: the task has not finished (a programming error).
    """
    match task.state:
        case TaskState.COMPLETED:
            result: dict[str, Any] = {"content": [_text(_as_text(task.result))], "isError": False}
            if isinstance(task.result, dict):
                result["structuredContent"] = task.result
            return result
        case TaskState.FAILED:
            if is_server_fault(task.error):
                raise server_fault(task)
            message = task.error.message if task.error is not None else "the task failed"
            return {"content": [_text(message)], "isError": True}
        case TaskState.CANCELLED:
            raise cancelled_without_result(task)
        case _:
            raise ValueError(f"task {task.id} has no result yet: it is {task.state}")


def _as_text(result: object) -> str:
    """A string result as itself (text for the model to read); anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def invalid_arguments_result(message: str) -> dict[str, Any]:
    """A plain call whose arguments do not fit the tool: a tool error the model can fix."""
    return {"content": [_text(message)], "isError": True}
