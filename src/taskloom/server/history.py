"""Execution history as plain tools, so operators can debug failures through their agent.

- ``task_attempts(task_id)``: every node attempt of one task (node, attempt, start, end,
  duration, outcome, error type, message, fingerprint), oldest first;
- ``tasks_last_failed()``: the latest failed (or timed-out) attempts, or with
  ``by_fingerprint`` one line per distinct error with its count, first and last seen.

Both see only the caller's tasks (another owner's id reads as not found), and answer
compact text: one line per attempt or error, messages cut at ``MESSAGE_LIMIT``.
"""

from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from taskloom.engine.errors import TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import FailureQuery, NodeAttempt, RunStore
from taskloom.server.wire import wire_status

MESSAGE_LIMIT: Final = 120
FAILURE_WINDOW: Final = 1_000
"""How many of the latest failed attempts ``tasks_last_failed`` looks at."""
HISTORY_TOOL_NAMES: Final = frozenset({"task_attempts", "tasks_last_failed"})

ToolHandler = Callable[[Any], Awaitable[dict[str, Any]]]
ToolSpec = tuple[type[BaseModel], str, ToolHandler]
"""A plain tool: its input model, its description and its handler."""


class AttemptsInput(BaseModel):
    """Which task's attempts."""

    model_config = ConfigDict(extra="forbid")

    task_id: str = Field(min_length=1, max_length=200, description="the task's id")
    failed_only: bool = Field(default=False, description="only attempts that failed")
    limit: int = Field(default=50, ge=1, le=500, description="most attempts to show")


class LastFailedInput(BaseModel):
    """Which recent failures."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=10, ge=1, le=100, description="most lines to show")
    by_fingerprint: bool = Field(
        default=False, description="one line per distinct error, with its count"
    )


class HistoryTools:
    """The two history tools, answering for one owner."""

    def __init__(self, manager: TaskManager, runs: RunStore, *, owner: str | None) -> None:
        self._manager = manager
        self._runs = runs
        self._owner = owner

    def specs(self) -> dict[str, ToolSpec]:
        """The tools by name."""
        return {
            "task_attempts": (
                AttemptsInput,
                "Show every node attempt of a task: timing, outcome and error.",
                self._attempts,
            ),
            "tasks_last_failed": (
                LastFailedInput,
                "Show your tasks' latest failed node attempts (by_fingerprint: each error once).",
                self._last_failed,
            ),
        }

    async def _attempts(self, query: AttemptsInput) -> dict[str, Any]:
        task = await self._manager.get(query.task_id, owner=self._owner)
        attempts = list(await self._runs.attempts(task.id))
        failed = sum(1 for attempt in attempts if attempt.error is not None)
        header = f"task {task.id}: {wire_status(task.state)} ({task.name}), "
        header += f"{len(attempts)} attempt(s), {failed} failed"
        if query.failed_only:
            attempts = [attempt for attempt in attempts if attempt.error is not None]
        lines = [header, *(attempt_line(attempt) for attempt in attempts[: query.limit])]
        if len(attempts) > query.limit:
            lines.append(f"… {len(attempts) - query.limit} more (raise limit)")
        return _text("\n".join(lines))

    async def _last_failed(self, query: LastFailedInput) -> dict[str, Any]:
        window = FailureQuery(owner=self._owner, match_owner=True, limit=FAILURE_WINDOW)
        failures = list(await self._runs.failed_attempts(window, self._manager.clock.now()))
        if not failures:
            return _text("no failed attempts")
        if query.by_fingerprint:
            lines = _by_fingerprint(failures, query.limit)
        else:
            names = await self._names(failure.task_id for failure in failures[: query.limit])
            lines = [
                f"{_time(failure.ended_at)}  {failure.task_id} ({names.get(failure.task_id, '?')})"
                f"  {_node(failure)}  {_error(failure)}"
                for failure in failures[: query.limit]
            ]
        if len(failures) == FAILURE_WINDOW:
            lines.append(f"(looked at the latest {FAILURE_WINDOW} failed attempts only)")
        return _text("\n".join(lines))

    async def _names(self, task_ids: Iterable[str]) -> dict[str, str]:
        names: dict[str, str] = {}
        for task_id in dict.fromkeys(task_ids):
            try:
                names[task_id] = (await self._manager.get(task_id, owner=self._owner)).name
            except TaskNotFoundError:  # expired meanwhile
                continue
        return names


def attempt_line(attempt: NodeAttempt) -> str:
    """One line about *attempt*: node, times, duration, outcome, and its error if any."""
    outcome = attempt.outcome.value if attempt.outcome is not None else "running"
    end = _time(attempt.ended_at)[11:] if attempt.ended_at is not None else "…"
    duration = f"  {_duration(attempt.duration)}" if attempt.duration is not None else ""
    line = f"{_node(attempt)}  {outcome}  {_time(attempt.started_at)} → {end}{duration}"
    return f"{line}  {_error(attempt)}" if attempt.error is not None else line


def _by_fingerprint(failures: list[NodeAttempt], limit: int) -> list[str]:
    groups: dict[str, list[NodeAttempt]] = {}
    for failure in failures:  # newest first, so each group's first entry is its latest
        key = failure.error.fingerprint if failure.error is not None else "-"
        groups.setdefault(key, []).append(failure)
    lines = []
    for group in list(groups.values())[:limit]:
        latest, first = group[0], group[-1]
        lines.append(
            f"{len(group)}x  first {_time(first.ended_at)}  last {_time(latest.ended_at)}"
            f"  {_node(latest)} of {latest.task_id}  {_error(latest)}"
        )
    return lines


def _node(attempt: NodeAttempt) -> str:
    return f"{attempt.node}#{attempt.attempt}"


def _error(attempt: NodeAttempt) -> str:
    error = attempt.error
    if error is None:
        return ""
    message = error.message.replace("\n", " ")
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    return f"{error.error_type}: {message}  [fp {error.fingerprint[:12]}]"


def _time(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if moment is not None else "-"


def _duration(duration: timedelta) -> str:
    return f"{duration.total_seconds():.3f}s"


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}
