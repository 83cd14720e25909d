"""The state table of docs/concepts.md says what taskloom/server/wire.py does."""

import re
from pathlib import Path

import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskFailure
from taskloom.engine.states import TaskState
from taskloom.server.wire import SERVER_FAULT_CODES, modern_status, wire_status
from taskloom.testing import InMemoryTaskStore

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def _row(state: TaskState) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    rows = re.findall(rf"^\| `{state.value}` \|(.*)\|$", text, flags=re.MULTILINE)
    assert len(rows) == 1, f"docs/concepts.md needs one table row for `{state.value}`"
    return [cell.strip() for cell in rows[0].split("|")]


def _statuses(cell: str) -> set[str]:
    return {word for word in re.findall(r"`([a-z_]+)`", cell) if word not in SERVER_FAULT_CODES}


async def _task(state: TaskState, code: str) -> Task:
    task = await TaskManager(InMemoryTaskStore()).create("t", {})
    error = TaskFailure(code=code, message="x") if state is TaskState.FAILED else None
    return task.model_copy(update={"state": state, "error": error})


@pytest.mark.parametrize("state", list(TaskState), ids=str)
async def test_each_state_shows_the_wire_statuses_of_wire_py(state: TaskState) -> None:
    legacy, modern, fallback = _row(state)
    assert _statuses(legacy) == {wire_status(state)}
    assert _statuses(fallback) == {wire_status(state)}  # the fallback tools use wire_status
    codes = ("node_failed", *SERVER_FAULT_CODES)
    outcomes = {modern_status(await _task(state, code)) for code in codes}
    assert _statuses(modern) == outcomes
    if state is TaskState.FAILED:
        assert set(re.findall(r"`([a-z_]+)`", modern)) >= SERVER_FAULT_CODES
