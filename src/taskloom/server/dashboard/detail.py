"""Everything the task page shows: the task, its graph, the timeline of node attempts,
its stored history (ADR 0036), its children and the forms of its pending questions."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from taskloom.engine.history import HistoryEntry
from taskloom.engine.models import Task
from taskloom.engine.registry import workflow_for
from taskloom.engine.runs import NodeAttempt
from taskloom.engine.states import TaskState
from taskloom.engine.view import percent, resume_action
from taskloom.server.dashboard.access import Viewer
from taskloom.server.dashboard.context import Dashboard
from taskloom.server.dashboard.forms import Field, fields
from taskloom.server.dashboard.graph import Graph, layout
from taskloom.server.dashboard.seen import digest

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
    updates: int = 0
    """For a folded line of progress: how many status messages it stands for."""


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
    children: tuple[Task, ...]
    questions: tuple[Question, ...]
    arguments: str
    result: str | None
    can_resume: bool
    resume_label: str
    """The resume button's name, for what it does (:func:`taskloom.engine.view.resume_action`)."""
    percent: str
    """How far the run is, as the shared mapping reads its stored progress."""

    def fingerprint(self) -> tuple[object, ...]:
        """What a live page compares to tell whether it changed (while a node runs, the
        timeline's widths change with the clock: a page re-checked redraws its bars)."""
        return (*self._stored(), tuple(bar.width for bar in self.bars))

    def seen(self) -> str:
        """The digest a page shows this with (:mod:`.seen`): of what the stored rows
        decide, not of the timeline's widths, which change with the clock alone while a
        node runs (a page would otherwise differ from every later read of it)."""
        return digest(self._stored())

    def _stored(self) -> tuple[object, ...]:
        return (
            self.task.version,
            tuple((box.name, box.state, box.detail) for box in self.graph.boxes),
            tuple((bar.label, bar.outcome) for bar in self.bars),
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
        graph=layout(task, task.shape or (workflow.shape() if workflow else None), nodes),
        bars=bars,
        timeline_height=height,
        hidden_attempts=max(0, len(attempts) - MAX_TIMELINE_ROWS),
        history=_history(task, entries, attempts),
        children=children.tasks,
        questions=questions,
        arguments=json.dumps(task.arguments, indent=2, ensure_ascii=False),
        result=(
            json.dumps(task.result, indent=2, ensure_ascii=False)
            if task.state is TaskState.COMPLETED
            else None
        ),
        can_resume=task.state in RESUMABLE and workflow is not None,
        resume_label=resume_action(task) or "",
        percent=percent(task),
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
    task: Task, entries: Sequence[HistoryEntry], attempts: tuple[NodeAttempt, ...]
) -> tuple[Event, ...]:
    """The stored changes of the task, with the start and end of its latest node
    attempts (as many as the timeline shows) between them, oldest first (an attempt
    that ends with the write of a change, at the same moment, comes before it).

    Progress (a change of the status message alone) is folded: the messages between two
    changes of state are one line that shows the latest, and that line of a run still
    under way reads the task's current message (which is never capped)."""
    events: list[Event] = []
    folded: Event | None = None
    for entry in entries:
        if entry.state_changed:
            folded = None
            events.append(
                Event(entry.at, entry.status_message or "", entry.state, str(entry.cause))
            )
            continue
        text = entry.status_message or ""
        if folded is None:
            folded = Event(entry.at, text, None, "progress", updates=1)
            events.append(folded)
        else:
            index = events.index(folded)
            folded = Event(entry.at, text, None, "progress", updates=folded.updates + 1)
            events[index] = folded
    if folded is not None and not task.is_terminal and task.status_message:
        index = events.index(folded)
        events[index] = Event(
            task.updated_at, task.status_message, None, "progress", folded.updates
        )
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
