"""A command run in-process leaves the root logger as it found it: ``serve`` sends the
logs to the ``sys.stderr`` of its start (a test's captured stream, closed after the
test), and a handler kept on it would turn every later record into a "Logging error"."""

import io
import logging
import sys
from pathlib import Path

import pytest

from taskloom.commands.log_scope import logging_kept
from tests.cli.test_commands import mistake


def test_serve_stopped_by_a_mistake_leaves_the_logging_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_flows.py").write_text("raise KeyError('missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_flows", raising=False)
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    db = str(tmp_path / "t.db")
    argv = ["serve", "--db", db, "--workflows", "broken_flows", "--log-level", "debug"]
    assert "cannot load workflow module 'broken_flows'" in mistake(capsys, *argv)
    assert (list(root.handlers), root.level) == before


class _Closing(logging.StreamHandler):  # type: ignore[type-arg]
    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def test_the_handlers_replaced_inside_come_back_and_the_added_are_closed() -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    added = _Closing(io.StringIO())
    with logging_kept():
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(added)
        root.setLevel(logging.DEBUG)
    assert (list(root.handlers), root.level) == before
    assert added.closed
