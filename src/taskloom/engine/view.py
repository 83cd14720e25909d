"""What stored state reads as to people: one mapping for the dashboard, the CLI and the MCP
status text (ADR 0042).

A node's checkpoint says what the runner last wrote, not what a person should read: when
a run is cancelled its running nodes are closed as ``failed`` (error ``Cancelled``) or,
when another process ended the run, put back to ``retrying`` as a dead worker's would
be. Read within their task, both are ``cancelled`` (or ``stopped``, when the task ended
another way), never ``failed``, ``retrying``, ``running`` or ``waiting``.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from taskloom.engine.dag import Workflow
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeRun, NodeState
from taskloom.engine.shape import RunShape
from taskloom.engine.states import TaskState

NOT_STARTED: Final = "not started"
SUMMARY_ORDER: Final = ("failed", "running", "retrying", "waiting", "stopped", "cancelled")
"""The most pressing first: what a map whose items differ is shown as."""


@dataclass(frozen=True)
class NodeView:
    """A node (or map item) as a person reads it."""

    label: str
    """``completed``, ``failed`` (it failed itself), ``stopped`` (the task ended, e.g.
    because another node failed, while it ran), ``cancelled`` (the task was cancelled
    while it ran), ``running``, ``retrying``, ``waiting`` or ``not started``."""
    settled: bool
    busy: bool


def shape_of(task: Task, workflow: Workflow[Any] | None = None) -> RunShape | None:
    """*task*'s run shape: the one stored with it, else its *workflow*'s (a task stored
    before shapes were), else ``None``."""
    if task.shape is not None:
        return task.shape
    return workflow.shape() if workflow is not None else None


def stopped_by_the_end(run: NodeRun) -> bool:
    """The runner stopped *run* because its task ended (it did not fail itself)."""
    return (
        run.state is NodeState.FAILED
        and run.error is not None
        and run.error.error_type == "Cancelled"
    )


def node_view(task: Task, run: NodeRun | None) -> NodeView:
    """How *run* reads within *task*: a node stopped because the task ended is
    ``cancelled`` if the task was cancelled, else ``stopped``, never ``failed``; a node
    that never started is ``not started``, whatever its task's state."""
    ended = "cancelled" if task.state is TaskState.CANCELLED else "stopped"
    if run is None:
        return NodeView(NOT_STARTED, settled=False, busy=False)
    if stopped_by_the_end(run):
        return NodeView(ended, settled=True, busy=False)
    if run.state in (NodeState.COMPLETED, NodeState.FAILED):
        return NodeView(str(run.state), settled=True, busy=False)
    if task.is_terminal:  # the task ended while it ran or waited
        return NodeView(ended, settled=True, busy=False)
    busy = run.state in (NodeState.RUNNING, NodeState.RETRYING)
    return NodeView(str(run.state), settled=False, busy=busy)


def map_view(task: Task, runs: Iterable[NodeRun], planned: int | None = None) -> tuple[str, str]:
    """A map's label (its items' if all alike, else the most pressing) and its item counts,
    e.g. ``("running", "10,000 items: 10 completed, 2 running, 9,988 not started")``;
    *planned* is the map's item count when known (items not started yet count too)."""
    labels = [node_view(task, run).label for run in runs]
    ended = None
    if task.is_terminal:
        ended = "cancelled" if task.state is TaskState.CANCELLED else "stopped"
    return summarise(labels, planned, ended=ended)


def summarise(
    labels: Sequence[str], planned: int | None = None, *, ended: str | None = None
) -> tuple[str, str]:
    """:func:`map_view` from the items' labels; *ended* is what a map that was under way
    when its task ended reads as (``cancelled``, ``stopped``)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    waiting = (planned or 0) - len(labels)
    if waiting > 0:
        counts[NOT_STARTED] = counts.get(NOT_STARTED, 0) + waiting
    size = sum(counts.values())
    if not size:
        return NOT_STARTED, "no items yet"
    if len(counts) == 1:
        state = next(iter(counts))
    elif NOT_STARTED in counts and set(counts) <= {NOT_STARTED, "completed"}:
        state = ended or "running"  # some done, some to go: under way, or ended so
    else:
        state = next((each for each in SUMMARY_ORDER if each in counts), min(counts))
    spread = ", ".join(f"{number:,} {each}" for each, number in sorted(counts.items()))
    return state, f"{size:,} item{'s' if size != 1 else ''}: {spread}"


def fraction(task: Task) -> float:
    """How far *task* is, 0..1: 1 once completed, else the progress its run stores (the
    nodes settled plus the part of each running node that it reported, see
    :mod:`taskloom.engine.progress`), else 0."""
    if task.state is TaskState.COMPLETED:
        return 1.0
    if task.progress is not None and task.progress.total:
        return max(0.0, min(task.progress.completed / task.progress.total, 1.0))
    return 0.0


def percent(task: Task) -> str:
    """:func:`fraction` as ``37%`` (``99%`` until the task completes, never a rounded
    ``100%`` of an unfinished run)."""
    value = fraction(task)
    if task.state is not TaskState.COMPLETED:
        value = min(value, 0.99)
    return f"{value:.0%}"


def progress_text(task: Task) -> str | None:
    """*task*'s stored progress for people, e.g. ``37% of 6 nodes``; ``None`` if none."""
    if task.progress is None:
        return None
    if task.progress.total:
        return f"{percent(task)} of {task.progress.total:g} nodes"
    return f"{task.progress.completed:g} done"


def resume_action(task: Task) -> str | None:
    """What the resume action is called for *task*, named for what it does, or ``None``
    when it cannot be resumed (it did not fail and was not cancelled)."""
    if task.state is TaskState.CANCELLED:
        return "Resume from where it stopped"
    if task.state is TaskState.FAILED:
        return "Resume from the failed node"
    return None
