"""Drawing progress and reading answers at the terminal: the pure parts."""

import io
from datetime import UTC, datetime

import pytest

from taskloom.commands.progress_view import (
    ProgressView,
    bar,
    overall_from_status,
    parse_status,
)
from taskloom.commands.prompt import parse_answer, yes_no_field
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import NodeRun, NodeState
from taskloom.engine.states import TaskState
from taskloom.workflows.countdown import countdown

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _task(state: TaskState, message: str | None) -> Task:
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
    )


def _done(*names: str) -> dict[str, NodeRun]:
    return {
        name: NodeRun(node=name, state=NodeState.COMPLETED, attempt=1, updated_at=NOW)
        for name in names
    }


def test_status_messages_are_taken_apart() -> None:
    status = parse_status("phase 2/3 count: 12/40 numbers")
    assert status is not None
    assert (status.number, status.phases, status.phase, status.done) == (2, 3, "count", 12)
    assert status.fraction == pytest.approx(0.3)
    assert parse_status("phase 1/3 list: 81 files found") is not None
    assert parse_status("started") is None
    assert overall_from_status("phase 2/3 count: 20/40 numbers") == pytest.approx(0.5)
    assert overall_from_status(None) is None


def test_bars_are_clamped() -> None:
    assert bar(0.5, 10) == "[#####.....]"
    assert bar(-1, 4) == "[....]"
    assert bar(7, 4) == "[####]"


def test_a_view_on_a_file_prints_one_line_per_change() -> None:
    out = io.StringIO()
    view = ProgressView(countdown, out, live=False)
    counting = _task(TaskState.RUNNING, "phase 2/3 count: 6/12 numbers")
    view.update(counting, _done("plan"))
    view.update(counting, _done("plan"))  # nothing changed: nothing printed
    view.update(_task(TaskState.COMPLETED, "done"), _done(*countdown.nodes))
    lines = out.getvalue().splitlines()
    assert lines == [
        "  [############............]  50%  running  phase 2/3 count: 6/12 numbers",
        "  [########################] 100%  completed  done",
    ]


def test_a_live_view_draws_a_bar_per_phase_in_place() -> None:
    out = io.StringIO()
    view = ProgressView(countdown, out, live=True)
    task = _task(TaskState.RUNNING, "phase 2/3 count: 6/12 numbers")
    assert view.lines(task, _done("plan"))[1:] == [
        "    plan   [########################] 1/1 nodes",
        "    count  [############............] 0/4 nodes  6/12 numbers",
        "    report [........................] 0/1 nodes",
    ]
    view.update(task, _done("plan"))
    view.update(task, _done("plan", "lane_0"))
    assert out.getvalue().count("\x1b[4A") == 1  # the second drawing replaced the first


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
