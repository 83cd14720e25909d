"""Plain tools over the task store, for hosts that cannot use MCP Tasks.

Many hosts announce no task support, so they can neither augment a call nor poll
``tasks/*``. These five tools give their model the same store through ordinary tool
calls: ``task_list``, ``task_status``, ``task_result``, ``task_cancel``, ``task_answer``.
Their descriptions tell a model how to poll, wait and answer; their answers are compact
text (a default ``task_list`` page and any status stay under 2 KB: messages, schemas
and questions shown are cut), and a problem (unknown id, finished task, wrong answer) is a tool error the model can read.
Their ``taskSupport`` is forbidden: calling them with ``params.task`` is ``-32601``.
"""

import json
from contextlib import aclosing
from datetime import datetime
from functools import cache
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from taskloom.engine.errors import TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.engine.submit import arguments_problem
from taskloom.engine.view import progress_text
from taskloom.server import audit
from taskloom.server.errors import to_mcp_error, unknown_tool
from taskloom.server.history import HISTORY_TOOL_NAMES, ToolSpec
from taskloom.server.wire import (
    WIRE_STATUS,
    WireStatus,
    call_tool_result,
    invalid_arguments_result,
    wire_status,
)

DEFAULT_MAX_WAIT_S: Final = 45.0
"""The longest ``task_result`` waits by default: the default ``plain_wait_s`` (ADR 0040)."""
LINE_LIMIT: Final = 180
"""Longest summary line of ``task_list`` (so a default page of 10 stays under 2 KB)."""
TEXT_LIMIT: Final = 160
"""Longest message or question a ``task_status`` answer repeats."""
SHOWN_QUESTIONS: Final = 2
"""Most pending questions a ``task_status`` answer shows (so it stays under 2 KB)."""
_SCHEMA_LIMIT: Final = 300
FALLBACK_TOOL_NAMES: Final = frozenset(
    {"task_list", "task_status", "task_result", "task_cancel", "task_answer"}
).union(HISTORY_TOOL_NAMES)


LIST_DESCRIPTION: Final = (
    "List your tasks, newest first, one line each: id, status (working, input_required, "
    "completed, failed, cancelled), tool, last change, message. Filter with status; pass "
    "next_cursor as cursor for the next page."
)
STATUS_DESCRIPTION: Final = (
    "Show one task's status, progress and message, and any question it waits on with the "
    "answer schema. It does not wait: to wait for the result, use task_result with wait_s."
)
RESULT_DESCRIPTION: Final = (
    "Get a task's result. Long jobs: pass wait_s (up to {max:g}) to wait that many seconds "
    "for it to finish; if it has not, the answer says so and you call task_result again. "
    "If the task waits on a question, the answer shows it at once: answer it with "
    "task_answer, then call task_result again."
)
"""With ``{max}``: the longest wait, which is what a plain call waits (``plain_wait_s``)
so that a follow-up fits every host the first call fits (ADR 0040)."""
CANCEL_DESCRIPTION: Final = (
    "Cancel a task that has not finished: its work stops and it has no result. Only when "
    "the user wants it stopped; a finished task cannot be cancelled."
)
ANSWER_DESCRIPTION: Final = (
    "Answer the question a task waits on (shown by task_status, task_result or the tool's "
    "own answer): answer is an object matching the question's answer schema; pass question "
    "(its key) only when several are pending. Then call task_result with wait_s."
)


class TaskIdInput(BaseModel):
    """Which task."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=200, description="the task's id")


class ResultInput(TaskIdInput):
    """Which task, and how long to wait for it to finish."""

    wait_s: float = Field(
        default=0,
        ge=0,
        allow_inf_nan=False,
        description="seconds to wait for the task to finish (more than the server's longest "
        "wait waits that long)",
    )


class ListInput(BaseModel):
    """Which page of tasks."""

    model_config = ConfigDict(extra="forbid")

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
        self,
        manager: TaskManager,
        *,
        owner: str | None,
        extra: dict[str, ToolSpec] | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
    ) -> None:
        """*max_wait_s*: the longest ``task_result`` waits (a longer ``wait_s`` is cut to
        it, and the answer says so): at most what a plain call waits, so that the
        follow-up fits the host's timeout as the first call does."""
        self._manager = manager
        self._owner = owner
        self._max_wait_s = max_wait_s
        result_description = RESULT_DESCRIPTION.format(max=max_wait_s)
        self._tools: dict[str, ToolSpec] = {
            "task_list": (ListInput, LIST_DESCRIPTION, self._list),
            "task_status": (TaskIdInput, STATUS_DESCRIPTION, self._status),
            "task_result": (ResultInput, result_description, self._result),
            "task_cancel": (TaskIdInput, CANCEL_DESCRIPTION, self._cancel),
            "task_answer": (AnswerInput, ANSWER_DESCRIPTION, self._answer),
            **(extra or {}),  # the history tools (history.py), when the server has them
        }

    def tools(self) -> list[types.Tool]:
        """The tools' definitions (no ``execution``: task support is forbidden)."""
        return [
            types.Tool(name=name, description=description, input_schema=_schema(model))
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
            audit.note(refused=INVALID_PARAMS)
            accepted = model.model_json_schema().get("properties", {})
            return invalid_arguments_result(arguments_problem(name, error, accepted))
        try:
            return await handler(parsed)
        except TaskloomError as error:
            refusal = to_mcp_error(error)
            audit.note(refused=refusal.error.code)
            return _error(refusal.message)

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
        return _text("\n".join(status_lines(task)))

    async def _result(self, query: ResultInput) -> dict[str, Any]:
        task = await self._manager.get(query.task_id, owner=self._owner)
        wait_s = min(query.wait_s, self._max_wait_s)
        cut = (
            [f"wait_s {query.wait_s:g} is more than this server waits: waited at most {wait_s:g} s"]
            if query.wait_s > wait_s
            else []
        )
        if not task.is_terminal and not task.input_requests and wait_s > 0:
            with anyio.move_on_after(wait_s) as waiting:
                task = await self._until_settled(task.id)
            if waiting.cancelled_caught:  # show how far it got meanwhile
                task = await self._manager.get(task.id, owner=self._owner)
        if task.input_requests:
            steps = "waits on a question: answer it with task_answer, then call task_result"
            return _text("\n".join([*cut, *status_lines(task), steps]))
        if not task.is_terminal:
            steps = (
                f"not finished: call task_result again (with wait_s {self._max_wait_s:g} to wait)"
            )
            return _text("\n".join([*cut, *status_lines(task), steps]))
        if task.state is TaskState.CANCELLED:
            return _error(f"task {task.id} was cancelled ({task.status_message}); no result")
        try:
            return call_tool_result(task)
        except MCPError as error:  # a server fault: no result either
            return _error(error.error.message)

    async def _until_settled(self, task_id: str) -> Task:
        """The task once it has ended or waits on a question (unbounded: bound the call)."""
        watch = self._manager.watch(task_id, owner=self._owner)
        async with aclosing(watch) as snapshots:
            async for task in snapshots:
                if task.input_requests:
                    break
        return task

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


def status_lines(task: Task) -> list[str]:
    """What ``task_status`` says about *task*: status, message, progress, times and each
    pending question with its answer schema."""
    lines = [f"task {task.id}: {_status(task)} ({task.name})"]
    if task.parent_id is not None:
        lines.append(f"child of task {task.parent_id}")
    if task.status_message:
        lines.append(f"message: {_cut(task.status_message, TEXT_LIMIT)}")
    progress = progress_text(task)
    if progress is not None:
        lines.append(f"progress: {progress}")
    lines.append(f"created {_short_time(task.created_at)}, updated {_short_time(task.updated_at)}")
    for key, question in list(task.input_requests.items())[:SHOWN_QUESTIONS]:
        schema = _cut(json.dumps(question.requested_schema, separators=(",", ":")), _SCHEMA_LIMIT)
        message = _cut(question.message, TEXT_LIMIT)
        lines.append(f"question {_cut(key, 40)!r}: {message}  answer schema: {schema}")
    if len(task.input_requests) > SHOWN_QUESTIONS:
        lines.append(f"… {len(task.input_requests) - SHOWN_QUESTIONS} more question(s)")
    return lines


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status(task: Task) -> str:
    return wire_status(task.state)


def _short_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """*model*'s JSON Schema, built once per model (tool lists are read often)."""
    return model.model_json_schema()
