"""Drawing progress and reading answers at the terminal: the pure parts."""

import io
import re
from datetime import UTC, datetime

import pytest
from rich.console import Console

from taskloom.commands.progress_view import ProgressView, bar, overall
from taskloom.commands.prompt import parse_answer, yes_no_field
from taskloom.engine.models import Progress, Task, TaskId
from taskloom.engine.runs import ErrorInfo, NodeRun, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.view import node_view
from taskloom.workflows.countdown import countdown

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _task(state: TaskState, message: str | None, done: float = 0) -> Task:
    return Task(
        id=TaskId("t1"),
        name="countdown",
        arguments={},
        owner=None,
        state=state,
        status_message=message,
        created_at=NOW,
        updated_at=NOW,
        ttl_ms=None,
        version=1,
        progress=Progress(completed=done, total=6),
    )


def _done(*names: str) -> dict[str, NodeRun]:
    return {
        name: NodeRun(node=name, state=NodeState.COMPLETED, attempt=1, updated_at=NOW)
        for name in names
    }


def _run(name: str, state: NodeState, error: str | None = None) -> dict[str, NodeRun]:
    info = (
        ErrorInfo(error_type=error, message="the task was cancelled", fingerprint="f")
        if error
        else None
    )
    return {name: NodeRun(node=name, state=state, attempt=1, updated_at=NOW, error=info)}


def _screen(view: ProgressView, task: Task, nodes: dict[str, NodeRun], width: int) -> list[str]:
    """What a terminal of *width* columns shows of the live drawing, without colour."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    console.print(view.renderable(task, nodes))
    return out.getvalue().splitlines()


def test_bars_are_clamped() -> None:
    assert bar(0.5, 10) == "[#####.....]"
    assert bar(-1, 4) == "[....]"
    assert bar(7, 4) == "[####]"


def test_the_fraction_is_the_stored_progress_not_the_status_text() -> None:
    assert overall(_task(TaskState.RUNNING, "phase 2/3 count: 9/10 numbers", 3), None) == 0.5
    assert overall(_task(TaskState.RUNNING, "phase 2/3 count: 9/10 numbers"), None) == 0.0
    assert overall(_task(TaskState.COMPLETED, None, 3), None) == 1.0


def test_a_view_on_a_file_prints_one_line_per_change() -> None:
    out = io.StringIO()
    view = ProgressView(countdown, out, live=False)
    counting = _task(TaskState.RUNNING, "phase 2/3 count: 6/12 numbers", 3)
    view.update(counting, _done("plan"))
    view.update(counting, _done("plan"))  # nothing changed: nothing printed
    view.update(_task(TaskState.COMPLETED, "done", 6), _done(*countdown.nodes))
    lines = out.getvalue().splitlines()
    assert lines == [
        "  [############............]  50%  running  phase 2/3 count: 6/12 numbers",
        "  [########################] 100%  completed  done",
    ]
    assert "\x1b" not in out.getvalue()


@pytest.mark.parametrize("width", [80, 200])
def test_the_live_drawing_has_a_line_per_phase_that_fits_the_width(width: int) -> None:
    view = ProgressView(countdown, io.StringIO(), live=True)
    message = "phase 2/3 count: 6/12 numbers " + "and a long tail " * 12
    nodes = _done("plan") | _run("lane_0", NodeState.RUNNING) | _run("lane_1", NodeState.RUNNING)
    screen = _screen(view, _task(TaskState.RUNNING, message, 1), nodes, width)
    assert all(len(line) <= width for line in screen), screen
    assert len(screen) == 4  # nothing wrapped
    assert screen[0].startswith("running  17%  phase 2/3 count: 6/12 numbers")
    assert [line.split()[0] for line in screen[1:]] == ["plan", "count", "report"]
    assert screen[1].split()[2:] == ["1/1", "nodes"]
    assert "0/4 nodes running lane_0, lane_1" in screen[2]


def test_a_failed_run_names_only_the_node_that_failed() -> None:
    view = ProgressView(countdown, io.StringIO(), live=True)
    nodes = _done("plan", "lane_3") | _run("lane_2", NodeState.FAILED)
    nodes |= _run("lane_0", NodeState.FAILED, "Cancelled") | _run(
        "lane_1", NodeState.FAILED, "Cancelled"
    )
    task = _task(TaskState.FAILED, "node 'lane_2' failed", 2)
    (count,) = [line for line in _screen(view, task, nodes, 80) if line.startswith("count")]
    assert count.endswith("1/4 nodes failed: lane_2  2 stopped")
    assert [node_view(task, run).label for run in nodes.values()] == [
        "completed",
        "completed",
        "failed",
        "stopped",
        "stopped",
    ]
    cancelled = task.model_copy(update={"state": TaskState.CANCELLED})
    assert node_view(cancelled, nodes["lane_0"]).label == "cancelled"


def test_answers_at_the_terminal() -> None:
    yes_no = {"type": "object", "properties": {"go": {"type": "boolean"}}}
    assert yes_no_field(yes_no) == "go"
    assert parse_answer("Y", yes_no) == {"go": True}
    assert parse_answer("no", yes_no) == {"go": False}
    assert parse_answer('{"go": true}', yes_no) == {"go": True}
    with pytest.raises(ValueError, match="y or n"):
        parse_answer("maybe", yes_no)
    free = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert yes_no_field(free) is None
    assert parse_answer('{"name": "Ada"}', free) == {"name": "Ada"}
    with pytest.raises(ValueError, match="JSON"):
        parse_answer("Ada", free)


def _drawn(monkeypatch: pytest.MonkeyPatch, **variables: str) -> str:
    """What the live view writes to a stream rich takes for a colour terminal
    (``FORCE_COLOR``), with *variables* set."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    view = ProgressView(countdown, out, live=True)
    view.update(_task(TaskState.RUNNING, "phase 2/3 count: 6/12 numbers", 3), _done("plan"))
    view.close()
    return out.getvalue()


def test_colour_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    sgr_colour = re.compile(r"\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;)")
    assert sgr_colour.search(_drawn(monkeypatch))
    plain = _drawn(monkeypatch, NO_COLOR="1")
    assert not sgr_colour.search(plain)
    assert "plan   ████████████████████████ 1/1 nodes" in plain
