"""The command line as real processes: a worker beside the CLI, and `taskloom run` in a
terminal (a pty) showing live progress until Ctrl-C cancels the task."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import anyio
import pytest

from taskloom.cli import main
from taskloom.commands.common import open_database
from taskloom.engine.submit import submit
from taskloom.workflows.countdown import countdown
from tests.helpers import checkout_env

REPOSITORY = Path(__file__).resolve().parents[2]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    code = raised.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().out


@pytest.mark.slow
def test_a_worker_process_runs_queued_tasks_and_stops_on_sigterm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "w.db"
    _cli(capsys, "db", "migrate", "--db", str(db))

    async def queue() -> str:
        async with open_database(db) as local:
            return (await submit(local.manager, countdown, {"start": 4, "tick_s": 0})).id

    worker = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "worker", "--db", str(db)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert worker.stderr is not None
        ready, _, _ = select.select([worker.stderr], [], [], 30)
        assert ready, "the worker did not start"
        banner = worker.stderr.readline()  # printed once it follows its changes
        task_id = anyio.run(queue, backend="asyncio")
        code, out = _cli(capsys, "tasks", "result", task_id, "--wait", "--db", str(db))
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert (code, json.loads(out)) == (0, {"counted": 4, "lanes": 4})
    assert worker.returncode == 0, err
    assert re.match(r"worker \S+:slot-0 on .*w\.db runs: countdown, repo_audit", banner)
    assert re.search(rf"UTC  countdown {task_id} running\n", err), err
    assert re.search(rf"UTC  countdown {task_id} completed\n", err), err
    assert "SIGTERM: stopping; runs in flight resume elsewhere" in err
    assert "Traceback" not in err


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""A terminal's colour and cursor codes, left out of what :meth:`Terminal.read_until` reads."""


class Terminal:
    """A child process whose stdin, stdout and stderr are a pseudo-terminal."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        master, slave = os.openpty()
        self._master = master
        env = checkout_env()
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, close_fds=True, env=env
        )
        os.close(slave)
        self.output = ""

    def read_until(self, pattern: str, within_s: float = 30.0) -> re.Match[str]:
        """Read what the process writes until *pattern* matches it (bounded)."""
        deadline = time.monotonic() + within_s
        while (found := re.search(pattern, _ANSI.sub("", self.output))) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} not seen in {self.output!r}"
            if not self._read(left):
                raise AssertionError(f"the process ended before {pattern!r}: {self.output!r}")
        return found

    def read_to_end(self, within_s: float = 30.0) -> None:
        deadline = time.monotonic() + within_s
        while self._read(max(deadline - time.monotonic(), 0.01)):
            assert time.monotonic() < deadline, self.output

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self._master, 65536)
        except OSError:  # EIO: the child side closed
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)

    def type(self, text: str) -> None:
        """Type *text* at the terminal."""
        os.write(self._master, text.encode())

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        os.close(self._master)


@pytest.mark.slow
def test_run_in_a_terminal_shows_live_progress_and_ctrl_c_cancels_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "t.db")
    arguments = '{"start": 400, "tick_s": 0.05}'
    terminal = Terminal(
        [sys.executable, "-m", "taskloom", "run", "countdown", "--input", arguments, "--db", db],
        tmp_path,
    )
    try:
        terminal.read_until(r"count: [1-9]\d*/\d+ numbers")  # mid-phase, counting
        terminal.process.send_signal(signal.SIGINT)
        terminal.read_to_end()
        assert terminal.process.wait(timeout=30) == 130
    finally:
        terminal.close()
    out = terminal.output
    assert "\x1b[" in out  # redrawn in place: a terminal gets ANSI, not a line per change
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert re.search(r"plan\s+█{24} 1/1 nodes", plain), plain
    assert "Ctrl-C: cancelling the task and stopping its nodes..." in out
    assert "Cancelled: task " in out
    assert "cancelled from the command line (Ctrl-C)" in out
    assert "nodes completed before it ended (1/6): plan" in out
    assert "Traceback" not in out

    assert _cli(capsys, "tasks", "list", "--db", db, "--json")[0] == 0
    _, listed = _cli(capsys, "tasks", "list", "--db", db, "--json")
    (task,) = json.loads(listed)["tasks"]
    assert task["state"] == "cancelled"
    assert task["status_message"] == "cancelled from the command line (Ctrl-C)"
    _, shown = _cli(capsys, "tasks", "show", task["id"], "--db", db, "--json")
    nodes = {node["node"]: node for node in json.loads(shown)["nodes"]}
    assert nodes["plan"]["state"] == "completed"
    assert {nodes[f"lane_{i}"]["outcomes"][-1] for i in range(4)} == {"cancelled"}
    assert nodes["report"]["state"] == "not started"


@pytest.mark.slow
def test_run_in_a_terminal_asks_the_tasks_question_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "t.db")
    argv = ["run", "confirm", "--db", db, "--workflows", "tests.cli.flows"]
    terminal = Terminal([sys.executable, "-m", "taskloom", *argv], tmp_path)
    try:
        terminal.read_until(r"The task asks: Launch the rocket\?\s+Go \(yes/no\) \[y/n\]: ")
        terminal.type("maybe\n")
        terminal.read_until(r"Please answer y or n \(yes or no\)\s+Go \(yes/no\) \[y/n\]: ")
        terminal.type("yes\n")
        terminal.read_to_end()
        assert terminal.process.wait(timeout=30) == 0, terminal.output
    finally:
        terminal.close()
    assert "answered" in terminal.output
    assert "Completed: task " in terminal.output
    _, listed = _cli(capsys, "tasks", "list", "--db", db, "--json")
    (task,) = json.loads(listed)["tasks"]
    assert (task["state"], task["result"]) == ("completed", "launched")
    assert task["input_responses"] == {"decide#1": {"go": True}}


@pytest.mark.slow
def test_a_run_killed_with_sigkill_is_finished_by_a_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "k.db")
    arguments = '{"start": 24, "tick_s": 0.25}'  # 1.5 s per lane: killed mid-lane
    terminal = Terminal(
        [sys.executable, "-m", "taskloom", "run", "countdown", "--input", arguments, "--db", db],
        tmp_path,
    )
    try:
        task_id = terminal.read_until(r"as task (\S+) in")[1]
        terminal.read_until(r"count: [1-9]\d*/\d+ numbers")
        terminal.process.kill()
        assert terminal.process.wait(timeout=30) == -signal.SIGKILL
    finally:
        terminal.close()
    worker = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "worker", "--db", db],
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        code, out = _cli(capsys, "tasks", "result", task_id, "--wait", "--db", db)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert (code, json.loads(out)) == (0, {"counted": 24, "lanes": 4})
    _, shown = _cli(capsys, "tasks", "show", task_id, "--db", db, "--json")
    nodes = {node["node"]: node for node in json.loads(shown)["nodes"]}
    assert nodes["plan"]["outcomes"] == ["completed"]  # not run again by the worker
    assert {tuple(nodes[f"lane_{i}"]["outcomes"]) for i in range(4)} == {
        ("interrupted", "completed")
    }


def _read_until(stream: IO[str], pattern: str, within_s: float = 30) -> str:
    """Lines of *stream* until one matches *pattern* (bounded); all of them."""
    deadline = time.monotonic() + within_s
    seen = ""
    while re.search(pattern, seen) is None:
        left = deadline - time.monotonic()
        assert left > 0, f"{pattern!r} not seen in {seen!r}"
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            line = stream.readline()
            assert line, f"the stream ended before {pattern!r}: {seen!r}"
            seen += line
    return seen


@pytest.mark.slow
def test_a_worker_logs_a_cancel_made_by_another_process_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, item 5: docs/cli.md promises a line per state change of its tasks;
    another process's cancel is one, and it stops the running nodes."""
    db = tmp_path / "w.db"
    _cli(capsys, "db", "migrate", "--db", str(db))

    async def queue() -> str:
        async with open_database(db) as local:
            slow = {"start": 10_000, "tick_s": 0.05}  # 125 s a lane: only a cancel ends it
            return (await submit(local.manager, countdown, slow)).id

    worker = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "worker", "--db", str(db)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert worker.stderr is not None
        _read_until(worker.stderr, r"runs: ")
        task_id = anyio.run(queue, backend="asyncio")
        _read_until(worker.stderr, rf"countdown {task_id} running\n")
        cancelled = subprocess.run(
            [sys.executable, "-m", "taskloom", "tasks", "cancel", task_id, "--db", str(db)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert cancelled.returncode == 0, cancelled.stderr
        logged = _read_until(worker.stderr, rf"countdown {task_id} cancelled")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert re.search(rf"UTC  countdown {task_id} cancelled: \S", logged), logged
    assert "Traceback" not in err
    _, shown = _cli(capsys, "tasks", "show", task_id, "--db", str(db), "--json")
    lanes = [node for node in json.loads(shown)["nodes"] if node["node"].startswith("lane_")]
    assert lanes
    assert {node["state"] for node in lanes} == {"cancelled"}
    assert {node["outcomes"][-1] for node in lanes} == {"cancelled"}  # their bodies stopped
