"""An engine's process moves its start-up objects out of the garbage collector's walks,
once (ADR 0061): later full collections walk only what came after."""

import gc
from pathlib import Path

import pytest

from taskloom import bootstrap
from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.persistence.sqlite import SqliteSettings


async def test_the_first_engine_of_a_process_freezes_start_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(bootstrap, "_frozen", False)  # as in a new process
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "taskloom.db"),
        load_entry_points=False,
        run_sweeper=False,
    )
    async with open_engine(settings) as engine:
        assert len(frozen) == 1  # once the engine has started, before it is handed out
        assert engine.worker is not None
    async with open_engine(settings):
        pass
    assert len(frozen) == 1
