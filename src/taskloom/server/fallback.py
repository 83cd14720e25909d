"""Plain tools over the task store, for hosts that cannot use MCP Tasks.

Many hosts announce no task support, so they can neither augment a call nor poll
``tasks/*``. These five tools give their model the same store through ordinary tool
calls: ``task_list``, ``task_status``, ``task_result``, ``task_cancel``, ``task_answer``.
Their answers are compact text (a default ``task_list`` page stays under 2 KB), and a
problem (unknown id, finished task, wrong answer) is a tool error the model can read.
Their ``taskSupport`` is forbidden: calling them with ``params.task`` is ``-32601``.
"""

import json
from datetime import datetime
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field, JsonValue, ValidationError

from taskloom.engine.errors import TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.server.errors import to_mcp_error, unknown_tool
from taskloom.server.history import HISTORY_TOOL_NAMES, ToolSpec
from taskloom.server.wire import (
    WIRE_STATUS,
    WireStatus,
    call_tool_result,
    invalid_arguments_result,
    wire_status,
)

LINE_LIMIT: Final = 180
"""Longest summary line of ``task_list`` (so a default page of 10 stays under 2 KB)."""
MAX_WAIT_S: Final = 60.0
_SCHEMA_LIMIT: Final = 600
FALLBACK_TOOL_NAMES: Final = frozenset(
    {"task_list", "task_status", "task_result", "task_cancel", "task_answer"}
).union(HISTORY_TOOL_NAMES)


class TaskIdInput(BaseModel):
    """Which task."""

    task_id: str = Field(min_length=1, max_length=200, description="the task's id")


class ResultInput(TaskIdInput):
    """Which task, and how long to wait for it to finish."""

    wait_s: float = Field(
        default=0, ge=0, le=MAX_WAIT_S, description="seconds to wait for the task to finish"
    )


class ListInput(BaseModel):
    """Which page of tasks."""

    status: WireStatus | None = Field(default=None, description="only tasks in this status")
    limit: int = Field(default=10, ge=1, le=50, description="tasks per page")
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")


class AnswerInput(TaskIdInput):
    """An answer to a question the task waits on."""

    answer: dict[str, JsonValue] = Field(description="the answer, matching the question's schema")
    question: str | None = Field(
        default=None, description="the question's key (needed only if several are pending)"
    )


class FallbackTools:
    """The five tools (and any *extra* ones), answering for one owner from the task store."""

    def __init__(
        self, manager: TaskManager, *, owner: str | None, extra: dict[str, ToolSpec] | None = None
    ) -> None:
        self._manager = manager
        self._owner = owner
        self._tools: dict[str, ToolSpec] = {
            "task_list": (ListInput, "List your tasks, newest first.", self._list),
            "task_status": (
                TaskIdInput,
                "Show a task's status, progress and any question it waits on.",
                self._status,
            ),
            "task_result": (
                ResultInput,
                "Get a finished task's result (optionally waiting up to wait_s seconds).",
                self._result,
            ),
            "task_cancel": (TaskIdInput, "Cancel a task that has not finished.", self._cancel),
            "task_answer": (
                AnswerInput,
                "Answer the question a task waits on (see task_status).",
                self._answer,
            ),
            **(extra or {}),  # the history tools (history.py), when the server has them
        }

    def tools(self) -> list[types.Tool]:
        """The tools' definitions (no ``execution``: task support is forbidden)."""
        return [
            types.Tool(name=name, description=description, input_schema=model.model_json_schema())
            for name, (model, description, _) in self._tools.items()
        ]

    async def call(self, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Run the tool *name*; engine problems become tool errors."""
        if name not in self._tools:  # a history tool on a server without history
            raise unknown_tool(name)
        model, _, handler = self._tools[name]
        try:
            parsed = model.model_validate(arguments or {})
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "arguments"
            return invalid_arguments_result(
                f"invalid arguments for {name}: {where}: {problem['msg']}"
            )
        try:
            return await handler(parsed)
        except TaskloomError as error:
            return _error(to_mcp_error(error).message)

    async def _list(self, query: ListInput) -> dict[str, Any]:
        states = None
        if query.status is not None:
            states = [state for state, status in WIRE_STATUS.items() if status == query.status]
        page = await self._manager.list(
            owner=self._owner, states=states, limit=query.limit, cursor=query.cursor
        )
        lines = [summary_line(task) for task in page.tasks] or ["no tasks"]
        if page.next_cursor is not None:
            lines.append(f"next_cursor: {page.next_cursor}")
        return _text("\n".join(lines))

    async def _status(self, query: TaskIdInput) -> dict[str, Any]:
        task = await self._manager.get(query.task_id, owner=self._owner)
        return _text("\n".join(_status_lines(task)))

    async def _result(self, query: ResultInput) -> dict[str, Any]:
        task = await self._manager.get(query.task_id, owner=self._owner)
        if not task.is_terminal and query.wait_s > 0:
            with anyio.move_on_after(query.wait_s):
                task = await self._manager.wait_until_terminal(task.id, owner=self._owner)
        if not task.is_terminal:
            return _text(
                "\n".join([*_status_lines(task), "not finished: call task_result again later"])
            )
        if task.state is TaskState.CANCELLED:
            return _error(f"task {task.id} was cancelled ({task.status_message}); no result")
        try:
            return call_tool_result(task)
        except MCPError as error:  # a server fault: no result either
            return _error(error.error.message)

    async def _cancel(self, query: TaskIdInput) -> dict[str, Any]:
        task = await self._manager.cancel(
            query.task_id, owner=self._owner, reason="cancelled through task_cancel"
        )
        return _text(f"task {task.id} is cancelled")

    async def _answer(self, query: AnswerInput) -> dict[str, Any]:
        task = await self._manager.get(query.task_id, owner=self._owner)
        pending = list(task.input_requests)
        key = query.question
        if key is None:
            if not pending:
                return _error(f"task {task.id} is not waiting for an answer ({_status(task)})")
            if len(pending) > 1:
                return _error(
                    f"task {task.id} waits on several questions; pass question: "
                    + ", ".join(pending)
                )
            key = pending[0]
        task = await self._manager.provide_input(task.id, key, query.answer, owner=self._owner)
        left = len(task.input_requests)
        more = f"; {left} question(s) still pending" if left else ""
        return _text(f"answer to {key!r} stored; task {task.id} is {_status(task)}{more}")


def summary_line(task: Task) -> str:
    """One line about *task*, at most ``LINE_LIMIT`` characters."""
    line = f"{task.id}  {_status(task)}  {task.name}  {_short_time(task.updated_at)}"
    if task.status_message:
        line += f"  {task.status_message}"
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 1] + "…"


def _status_lines(task: Task) -> list[str]:
    lines = [f"task {task.id}: {_status(task)} ({task.name})"]
    if task.status_message:
        lines.append(f"message: {task.status_message}")
    if task.progress is not None:
        total = f"/{task.progress.total:g}" if task.progress.total else ""
        lines.append(f"progress: {task.progress.completed:g}{total}")
    lines.append(f"created {_short_time(task.created_at)}, updated {_short_time(task.updated_at)}")
    for key, question in task.input_requests.items():
        schema = json.dumps(question.requested_schema, separators=(",", ":"))
        if len(schema) > _SCHEMA_LIMIT:
            schema = schema[: _SCHEMA_LIMIT - 1] + "…"
        lines.append(f"question {key!r}: {question.message}  answer schema: {schema}")
    return lines


def _status(task: Task) -> str:
    return wire_status(task.state)


def _short_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
