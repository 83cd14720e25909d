"""``taskloom serve`` as a real process stops cleanly on Ctrl-C (SIGINT) and SIGTERM, over
stdio (whose reader used to block until EOF) and HTTP; its run in flight is handed back
and a restarted server finishes it."""

import json
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from taskloom.commands.common import open_database
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.workflows.countdown import countdown
from tests.cli.test_processes import _cli
from tests.helpers import checkout_env

STOP_WITHIN_S = 15


def _serve(db: Path, transport: str, cwd: Path) -> subprocess.Popen[str]:
    http = ["--http", "127.0.0.1:0"] if transport == "http" else []
    return subprocess.Popen(
        [sys.executable, "-m", "taskloom", "serve", "--db", str(db), *http],
        stdin=subprocess.PIPE,  # kept open: over stdio, only a signal can stop it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=checkout_env(TASKLOOM_LINGER="0"),  # the restart is what resumes the run
    )


def _state(db: Path, task_id: str) -> TaskState:
    async def read() -> TaskState:
        async with open_database(db, read_only=True) as local:
            return (await local.manager.get(task_id)).state

    return anyio.run(read, backend="asyncio")


def _until_running(db: Path, task_id: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while _state(db, task_id) is not TaskState.RUNNING:
        assert time.monotonic() < deadline, "the server never started the run"
        time.sleep(0.05)  # polling the database: the condition, not the sleep, decides


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_on_a_signal_and_a_restart_resumes_its_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: str, stop: signal.Signals
) -> None:
    db = tmp_path / "s.db"
    _cli(capsys, "db", "migrate", "--db", str(db))

    async def queue() -> str:
        async with open_database(db) as local:
            return (await submit(local.manager, countdown, {"start": 12, "tick_s": 0.25})).id

    task_id = anyio.run(queue, backend="asyncio")
    server = _serve(db, transport, tmp_path)
    try:
        assert server.stderr is not None
        if transport == "http":
            ready, _, _ = select.select([server.stderr], [], [], 30)
            assert ready, "no line from the HTTP server"
            line = server.stderr.readline()
            while line.startswith("20"):  # a log record (the no-tokens warning)
                line = server.stderr.readline()
            assert re.fullmatch(
                r"taskloom: serving MCP at http://127\.0\.0\.1:\d+/mcp \(Ctrl-C stops\)\n", line
            ), line
        _until_running(db, task_id)
        started = time.monotonic()
        server.send_signal(stop)
        server.wait(timeout=STOP_WITHIN_S)  # stdin stays open: EOF does not stop it
        assert time.monotonic() - started < STOP_WITHIN_S
        _, err = server.communicate(timeout=STOP_WITHIN_S)  # it has ended: closes the pipes
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
    assert server.returncode == 0, err
    assert f"taskloom: {stop.name}: stopping" in err
    assert "Traceback" not in err
    assert _state(db, task_id) is TaskState.RUNNING  # handed back, not failed

    restarted = _serve(db, "stdio", tmp_path)
    try:
        code, out = _cli(capsys, "tasks", "result", task_id, "--wait", "--db", str(db))
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.communicate(timeout=STOP_WITHIN_S)
    assert code == 0
    assert json.loads(out)["counted"] == 12
