"""Work goes on after a stdio server's host leaves (ADR 0040): a real one-shot host
(tests/e2e/leaving_host.py) starts `taskloom serve`, gets a deferred answer and leaves;
the server exits promptly and a lingering worker finishes the task, with no command from
anyone, then exits. The tests only read the database."""

import json
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from taskloom.commands.common import open_database, open_store
from taskloom.engine.foreign import DEFAULT_INTERVAL_S
from taskloom.linger import linger_lock, lock_path, log_path
from tests.helpers import checkout_env, eventually

REPOSITORY = Path(__file__).resolve().parents[2]


async def _leave(database: Path, how: str, *flags: str) -> dict[str, Any]:
    """Run the one-shot host to its end (bounded); what it printed."""
    command = [sys.executable, "-m", "tests.e2e.leaving_host", str(database), how, *flags]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, cwd=REPOSITORY, check=False)
    assert done.returncode == 0, done.stderr.decode()
    printed: dict[str, Any] = json.loads(done.stdout)
    return printed


def _state(database: Path, task_id: str) -> str:
    """The task's stored state, read without any taskloom code running it."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (state,) = connection.execute("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return str(state)


async def _serve(database: Path) -> Process:
    """``taskloom serve`` on *database*, its stdin and stdout piped."""
    return await anyio.open_process(
        [sys.executable, "-m", "taskloom", "serve", "--db", str(database)],
        cwd=REPOSITORY,
        env=checkout_env(),
        stderr=subprocess.DEVNULL,
    )


async def _initialize(server: Process, request_id: int = 1, within_s: float = 30) -> None:
    """An ``initialize`` round trip with a stdio server, bounded by *within_s*."""
    assert server.stdin is not None
    assert server.stdout is not None
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    answers = BufferedByteReceiveStream(server.stdout)
    with anyio.fail_after(within_s):
        await server.stdin.send(json.dumps(message).encode() + b"\n")
        while json.loads(await answers.receive_until(b"\n", 1 << 20)).get("id") != request_id:
            pass


def _lock_free(database: Path) -> bool:
    with linger_lock(database) as taken:
        return taken


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stdin", "sigterm"])
async def test_a_task_completes_after_its_host_left(tmp_path: Path, how: str) -> None:
    database = tmp_path / "x.db"
    host = await _leave(database, how)
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
    host = await _leave(database, "stdin", "--no-linger")
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
        host = await _leave(database, "stdin")
        log = log_path(database)

        async def left_alone() -> bool:
            return log.exists() and "another lingering worker runs" in log.read_text()

        await eventually(left_alone, within_s=30, every_s=0.2)
        assert _state(database, host["taskId"]) in ("queued", "running")


@pytest.mark.slow
async def test_others_unfinished_tasks_start_no_lingering_worker(tmp_path: Path) -> None:
    """The server's change feed carries another process's running task (the SQLite poll)
    and the note it writes on a run of a version no process has; neither is its own."""
    database = tmp_path / "x.db"
    arguments = {"start": 4, "tick_s": 0.1}
    async with open_store(database, create=True):
        pass  # created and migrated
    async with open_database(database) as local:
        running = await local.manager.create("countdown", arguments)
        [claimed] = await local.manager.claim(
            worker="elsewhere",
            workflows=frozenset({"countdown"}),
            lease_for=timedelta(hours=1),
            limit=1,
        )
        assert claimed.task.id == running.id
        orphan = await local.manager.create("countdown", arguments, workflow_version="999")
    server = await _serve(database)
    assert server.stdin is not None
    try:
        async with open_database(database) as local:

            async def noted() -> bool:  # the server's worker is up, and wrote on the orphan
                message = (await local.manager.get(orphan.id)).status_message or ""
                return message.startswith("waiting for a process")

            await eventually(noted, within_s=30, every_s=0.1)
            await _initialize(server)  # it serves, and follows its feed
            await local.manager.report_progress(running.id, completed=1, total=4)
            # A window of four of its polls (0.25 s) to see that change on its feed; what
            # follows asserts that nothing happened, so it never passes by luck of timing.
            await anyio.sleep(4 * DEFAULT_INTERVAL_S)
    finally:
        with anyio.CancelScope(shield=True):
            await server.stdin.aclose()  # the host leaves: the server ends
            with anyio.move_on_after(30):
                await server.wait()
            if server.returncode is None:  # it did not end: no wait without end
                server.kill()
                await server.wait()
            await server.aclose()
    assert server.returncode == 0
    assert not log_path(database).exists()  # no lingering worker was started
    assert _state(database, running.id) == "running"
    assert _state(database, orphan.id) == "queued"


@pytest.mark.slow
async def test_a_lingering_worker_leaves_a_database_that_was_deleted(tmp_path: Path) -> None:
    """A lingering worker whose database is deleted under it (a benchmark's or a test's
    temporary folder) exits instead of running forever on the deleted file."""
    database = tmp_path / "x.db"
    host = await _leave(database, "stdin")
    log = log_path(database)

    async def working() -> bool:
        return log.exists() and "runs what is left" in log.read_text()

    await eventually(working, within_s=20, every_s=0.1)
    assert _state(database, host["taskId"]) != "completed"  # work was left when deleted
    for name in ("x.db", "x.db-wal", "x.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)

    async def exited() -> bool:
        return _lock_free(database) and "was deleted; the lingering worker exits" in (
            log.read_text()
        )

    await eventually(exited, within_s=20, every_s=0.2)
    assert "countdown " + host["taskId"] + " completed" not in log.read_text()
