"""Issue 17, item 5: ``--version`` everywhere, read commands that never write, a locked
database in one line, and a broken workflow module in one line."""

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from taskloom import __version__
from taskloom.cli import app
from tests.cli.test_commands import cli, mistake

HOLD_LOCK = """
import sqlite3, sys
raw = sqlite3.connect(sys.argv[1], isolation_level=None)
raw.execute("PRAGMA locking_mode = EXCLUSIVE")
raw.execute("BEGIN EXCLUSIVE")
raw.execute("DELETE FROM tasks")
print("locked", flush=True)
sys.stdin.read()
"""


def _every_parser_argv() -> Iterator[list[str]]:
    def walk(command: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        if isinstance(command, click.Group):
            for name, child in command.commands.items():
                yield from walk(child, [*path, name])

    yield from walk(app, [])


def test_every_command_says_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(_every_parser_argv())
    assert ["tasks", "list"] in commands
    assert ["serve"] in commands
    for argv in commands:
        code, out, _ = cli(capsys, *argv, "--version")
        assert (code, out) == (0, f"taskloom {__version__}\n"), argv


@pytest.fixture
def db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "t.db"
    cli(capsys, "run", "countdown", "--input", '{"start": 1, "tick_s": 0}', "--db", str(path))
    return path


READS = (["tasks", "list"], ["db", "check"])


def test_reads_work_on_a_read_only_database_and_write_nothing(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    before = db.read_bytes()
    db.chmod(stat.S_IRUSR)
    try:
        for argv in READS:
            code, out, _ = cli(capsys, *argv, "--db", str(db))
            assert code == 0, argv
        code, out, _ = cli(capsys, "tasks", "list", "--db", str(db))
        assert "countdown" in out
        assert "completed" in out
        assert mistake(capsys, "tasks", "cancel", "nope", "--db", str(db)).startswith(
            "taskloom: error: "
        )
    finally:
        db.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert db.read_bytes() == before


def test_a_read_in_missing_folders_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "such" / "t.db"
    for argv in (*READS, ["tasks", "show", "x"], ["tasks", "watch", "x"]):
        assert mistake(capsys, *argv, "--db", str(missing)) == (
            f"taskloom: error: no taskloom database at {missing} (pass --db PATH or set TASKLOOM_DB)\n"
        )
    assert os.listdir(tmp_path) == []


def test_a_locked_database_is_one_line_within_seconds(
    capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        for argv in (*READS, ["tasks", "cancel", "x"]):
            started = time.monotonic()
            line = mistake(capsys, *argv, "--db", str(db))
            assert time.monotonic() - started < 6, argv
            assert line.startswith(
                f"taskloom: error: the database {db} is locked by another process"
            ), line
    finally:
        holder.communicate("", timeout=10)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = 1\ndef broken(:\n    pass\n", "SyntaxError at {file}:2: invalid syntax"),
        ("SETTINGS = {}\n\nvalue = SETTINGS['missing']\n", "KeyError at {file}:3: 'missing'"),
    ],
)
def test_a_broken_workflow_module_is_one_line_naming_file_and_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    expected: str,
) -> None:
    module = tmp_path / "broken_flows.py"
    module.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_flows", raising=False)
    db = str(tmp_path / "t.db")
    for argv in (["workflows", "list"], ["run", "broken", "--db", db], ["serve", "--db", db]):
        assert mistake(capsys, *argv, "--workflows", "broken_flows") == (
            "taskloom: error: cannot load workflow module 'broken_flows': "
            f"{expected.format(file=module)}\n"
        )
