"""``--no-linger`` and its variable and project-file key, and when a stdio server hands
its unfinished tasks to a lingering worker (ADR 0040)."""

from pathlib import Path

import pytest

from taskloom.commands.serve_settings import server_settings
from taskloom.config import TaskloomSettings
from taskloom.linger import after_host_note, hands_off, log_path
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings
from tests.unit.test_oauth_options import parse


def test_the_flag_the_variable_and_the_project_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert server_settings(parse([])).linger is True
    assert server_settings(parse(["--no-linger"])).linger is False
    monkeypatch.setenv("TASKLOOM_LINGER", "0")
    assert server_settings(parse([])).linger is False
    assert server_settings(parse(["--linger"])).linger is True
    monkeypatch.delenv("TASKLOOM_LINGER")
    (tmp_path / "taskloom.toml").write_text("[serve]\nlinger = false\n")
    assert server_settings(parse([])).linger is False


def test_only_a_stdio_server_on_sqlite_with_linger_hands_off(tmp_path: Path) -> None:
    database = SqliteSettings(path=tmp_path / "t.db")
    on = TaskloomSettings(database=database)
    assert hands_off(on)
    note = after_host_note(on)
    assert "a background worker on the same database finishes the task" in note
    assert str(log_path(tmp_path / "t.db")) in note
    refusals = [
        on.model_copy(update={"server": ServerSettings(linger=False)}),
        on.model_copy(update={"run_worker": False}),
        on.model_copy(update={"database": database.model_copy(update={"read_only": True})}),
        on.model_copy(update={"database": PostgresSettings(url="postgresql://h/db")}),
    ]
    for off in refusals:
        assert not hands_off(off)
        assert "the task waits, unfinished, until taskloom runs again" in after_host_note(off)
