"""Work goes on after a stdio server's host leaves (ADR 0040): a real one-shot host
(tests/e2e/leaving_host.py) starts `taskloom serve`, gets a deferred answer and leaves;
the server exits promptly and a lingering worker finishes the task, with no command from
anyone, then exits. The tests only read the database."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from taskloom.linger import linger_lock, lock_path, log_path
from tests.helpers import eventually

REPOSITORY = Path(__file__).resolve().parents[2]


def _leave(database: Path, how: str, *flags: str) -> dict[str, Any]:
    """Run the one-shot host to its end; what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.e2e.leaving_host", str(database), how, *flags],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


def _state(database: Path, task_id: str) -> str:
    """The task's stored state, read without any taskloom code running it."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (state,) = connection.execute("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return str(state)


def _lock_free(database: Path) -> bool:
    with linger_lock(database) as taken:
        return taken


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stdin", "sigterm"])
async def test_a_task_completes_after_its_host_left(tmp_path: Path, how: str) -> None:
    database = tmp_path / "x.db"
    host = _leave(database, how)
    assert host["code"] == 0
    assert host["exit_s"] < (5 if how == "stdin" else 10)
    assert host["isError"] is False
    log = log_path(database)
    assert (
        f"a background worker on the same database finishes the task (log: {log})" in (host["text"])
    )

    async def completed() -> bool:
        return _state(database, host["taskId"]) == "completed"

    await eventually(completed, within_s=40, every_s=0.2)

    async def exited() -> bool:
        return _lock_free(database) and "the lingering worker exits" in log.read_text()

    await eventually(exited, within_s=20, every_s=0.2)
    assert lock_path(database).exists()
    text = log.read_text()
    assert f"countdown {host['taskId']} completed" in text
    assert "Traceback" not in text


@pytest.mark.slow
async def test_no_linger_leaves_the_task_for_the_next_process(tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    host = _leave(database, "stdin", "--no-linger")
    assert host["code"] == 0
    assert "the task waits, unfinished, until taskloom runs again" in host["text"]
    assert _state(database, host["taskId"]) in ("queued", "running")
    assert not log_path(database).exists()


@pytest.mark.slow
async def test_one_lingering_worker_per_database(tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    database.touch()
    with linger_lock(database) as taken:  # as if another lingering worker ran
        assert taken
        host = _leave(database, "stdin")
        log = log_path(database)

        async def left_alone() -> bool:
            return log.exists() and "another lingering worker runs" in log.read_text()

        await eventually(left_alone, within_s=30, every_s=0.2)
        assert _state(database, host["taskId"]) in ("queued", "running")
