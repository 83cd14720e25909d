"""Everything the task page shows: the task, its graph, the timeline of node attempts,
its stored history (ADR 0036), its children and the forms of its pending questions."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from taskloom.engine.history import MAX_STATUS_ROWS, HistoryEntry
from taskloom.engine.models import Task
from taskloom.engine.registry import workflow_for
from taskloom.engine.runs import NodeAttempt
from taskloom.engine.states import TaskState
from taskloom.server.dashboard.access import Viewer
from taskloom.server.dashboard.context import Dashboard
from taskloom.server.dashboard.forms import Field, fields
from taskloom.server.dashboard.graph import Graph, layout

TIMELINE_WIDTH: Final = 640
ROW_HEIGHT: Final = 22
LABEL_WIDTH: Final = 170
MAX_TIMELINE_ROWS: Final = 200
MAX_CHILDREN: Final = 100
RESUMABLE: Final = frozenset({TaskState.FAILED, TaskState.CANCELLED})


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline."""

    label: str
    outcome: str
    y: int
    x: float
    width: float
    title: str


@dataclass(frozen=True)
class Event:
    """One line of the history: a stored change of the task, or a node attempt's start
    or end (read from the stored attempts)."""

    at: datetime
    text: str
    state: TaskState | None
    """The state this change left the task in; ``None`` for a node attempt."""
    cause: str | None = None


@dataclass(frozen=True)
class Question:
    """A pending question and its form."""

    key: str
    message: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Detail:
    """The task page's content."""

    task: Task
    graph: Graph
    bars: tuple[Bar, ...]
    timeline_height: int
    hidden_attempts: int
    history: tuple[Event, ...]
    texts_capped: bool
    """The task reached the cap of status-text rows: later texts were not kept."""
    children: tuple[Task, ...]
    questions: tuple[Question, ...]
    arguments: str
    result: str | None
    can_resume: bool

    def fingerprint(self) -> tuple[object, ...]:
        """What a live page compares to tell whether it changed."""
        return (
            self.task.version,
            tuple((box.name, box.state, box.detail) for box in self.graph.boxes),
            tuple((bar.label, bar.outcome, bar.width) for bar in self.bars),
            tuple((child.id, child.version) for child in self.children),
        )


async def detail(dashboard: Dashboard, viewer: Viewer, task_id: str) -> Detail:
    """The page of *task_id* as *viewer* sees it.

    Raises:
        TaskNotFoundError: no such task visible to the viewer.
    """
    manager = dashboard.manager
    task, entries = await manager.history(task_id, owner=viewer.owner)
    workflow = workflow_for(dashboard.workflows, task.name, task.workflow_version)
    nodes = await dashboard.runs.checkpoints(task.id)
    attempts = tuple(await dashboard.runs.attempts(task.id))
    children = await manager.list(owner=viewer.owner, parent_id=task.id, limit=MAX_CHILDREN)
    bars, height = _timeline(attempts, manager.clock.now())
    questions = tuple(
        Question(key, request.message, fields(request.requested_schema))
        for key, request in task.input_requests.items()
    )
    return Detail(
        task=task,
        graph=layout(workflow, nodes),
        bars=bars,
        timeline_height=height,
        hidden_attempts=max(0, len(attempts) - MAX_TIMELINE_ROWS),
        history=_history(entries, attempts),
        texts_capped=sum(not entry.state_changed for entry in entries) >= MAX_STATUS_ROWS,
        children=children.tasks,
        questions=questions,
        arguments=json.dumps(task.arguments, indent=2, ensure_ascii=False),
        result=(
            json.dumps(task.result, indent=2, ensure_ascii=False)
            if task.state is TaskState.COMPLETED
            else None
        ),
        can_resume=task.state in RESUMABLE and workflow is not None,
    )


def _timeline(attempts: tuple[NodeAttempt, ...], now: datetime) -> tuple[tuple[Bar, ...], int]:
    """Bars of the latest attempts on one time axis (a running one ends now)."""
    shown = sorted(attempts, key=lambda each: each.started_at)[-MAX_TIMELINE_ROWS:]
    if not shown:
        return (), 0
    start = shown[0].started_at
    end = max(max(each.ended_at or now for each in shown), now if _open(shown) else start)
    span = max((end - start).total_seconds(), 0.001)
    scale = TIMELINE_WIDTH / span
    bars = []
    for row, attempt in enumerate(shown):
        finished = attempt.ended_at or now
        outcome = str(attempt.outcome) if attempt.outcome is not None else "running"
        took = (finished - attempt.started_at).total_seconds()
        title = f"{attempt.node} attempt {attempt.attempt}: {outcome}, {took:.2f} s"
        if attempt.error is not None:
            title += f" ({attempt.error.error_type}: {attempt.error.message})"
        bars.append(
            Bar(
                label=f"{attempt.node} #{attempt.attempt}",
                outcome=outcome,
                y=row * ROW_HEIGHT,
                x=LABEL_WIDTH + (attempt.started_at - start).total_seconds() * scale,
                width=max(took * scale, 2.0),
                title=title,
            )
        )
    return tuple(bars), len(bars) * ROW_HEIGHT


def _open(attempts: list[NodeAttempt]) -> bool:
    return any(each.ended_at is None for each in attempts)


def _history(
    entries: Sequence[HistoryEntry], attempts: tuple[NodeAttempt, ...]
) -> tuple[Event, ...]:
    """The stored changes of the task, with the start and end of its latest node
    attempts (as many as the timeline shows) between them, oldest first (an attempt
    that ends with the write of a change, at the same moment, comes before it)."""
    events = [
        Event(entry.at, entry.status_message or "", entry.state, str(entry.cause))
        for entry in entries
    ]
    for attempt in sorted(attempts, key=lambda each: each.started_at)[-MAX_TIMELINE_ROWS:]:
        events.append(
            Event(attempt.started_at, f"{attempt.node} attempt {attempt.attempt} started", None)
        )
        if attempt.ended_at is not None:
            text = f"{attempt.node} attempt {attempt.attempt} {attempt.outcome}"
            if attempt.error is not None:
                text += f": {attempt.error.message}"
            events.append(Event(attempt.ended_at, text, None))
    return tuple(sorted(events, key=lambda event: (event.at, event.state is not None)))
