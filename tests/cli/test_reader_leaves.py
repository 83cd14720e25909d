"""A command that prints while it follows a task, piped into a reader that leaves early
(``| head -1``): no traceback, and the task is never left running with no runner."""

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from taskloom.cli import main
from taskloom.commands import dispatch as dispatch_module
from taskloom.commands.common import open_database
from taskloom.commands.dispatch import dispatch
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.workflows.countdown import countdown
from tests.helpers import checkout_env

REPOSITORY = Path(__file__).resolve().parents[2]
LONG: dict[str, object] = {"start": 10_000, "tick_s": 0.01}
"""A countdown that runs for minutes unless cancelled."""


def _task(db: Path, task_id: str) -> Task:
    async def get() -> Task:
        async with open_database(db, read_only=True) as local:
            return await local.manager.get(task_id)

    return anyio.run(get, backend="asyncio")


def _piped_into_head(command: str, cwd: Path) -> tuple[int, str, str]:
    """Run ``taskloom COMMAND | head -1`` in bash; the exit code is taskloom's."""
    script = f"{sys.executable} -m taskloom {command} | head -1; exit ${{PIPESTATUS[0]}}"
    env = checkout_env()
    done = subprocess.run(
        ["bash", "-c", script],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_run_piped_into_head_cancels_its_task_and_exits_quietly(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    code, out, err = _piped_into_head(f"run countdown '{json.dumps(LONG)}' --db {db}", tmp_path)

    found = re.match(r"Running countdown as task (\S+) in ", out)
    assert found is not None, out
    assert out.count("\n") == 1
    assert (code, err) == (130, "")
    task = _task(db, found.group(1))
    assert task.state is TaskState.CANCELLED
    assert "broken pipe" in (task.status_message or "")


@pytest.mark.slow
def test_run_whose_pipe_is_closed_cancels_its_task(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = checkout_env()
    argv = [sys.executable, "-m", "taskloom", "run", "countdown", json.dumps(LONG), "--db"]
    with subprocess.Popen(
        [*argv, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # the reader leaves
        err = process.stderr.read()
        code = process.wait(timeout=120)
    found = re.match(r"Running countdown as task (\S+) in ", first)
    assert found is not None, first
    assert (code, err) == (130, "")
    assert _task(db, found.group(1)).state is TaskState.CANCELLED


@pytest.mark.slow
def test_tasks_watch_piped_into_head_stops_watching_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "t.db"
    with pytest.raises(SystemExit):
        main(["db", "migrate", "--db", str(db)])
    capsys.readouterr()

    async def queue() -> str:
        async with open_database(db) as local:
            return (await submit(local.manager, countdown, LONG)).id

    task_id = anyio.run(queue, backend="asyncio")
    # No worker: after the first line, the next thing printed is the note that none
    # serves the task, which finds the reader gone.
    code, out, err = _piped_into_head(f"tasks watch {task_id} --db {db}", tmp_path)

    assert out.count("\n") == 1, out
    assert (code, err) == (0, "")
    assert _task(db, task_id).state is TaskState.QUEUED  # not this command's to cancel


def test_a_broken_pipe_raised_inside_a_task_group_exits_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def reader_left(*_: object, **__: object) -> int:
        raise ExceptionGroup("in a store", [ExceptionGroup("inner", [BrokenPipeError(32, "")])])

    monkeypatch.setattr("taskloom.commands.dispatch.anyio.run", reader_left)
    monkeypatch.setattr(dispatch_module, "silence_stdout", lambda: None)  # not pytest's stdout
    with pytest.raises(SystemExit) as raised:
        dispatch(
            "tasks_watch:watch_task",
            {"db": "t.db", "json": False, "workflows": [], "task_id": "t1"},
        )
    assert raised.value.code == 0
    assert capsys.readouterr().err == ""
