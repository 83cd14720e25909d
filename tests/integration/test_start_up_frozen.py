"""A process taskloom owns moves its start-up objects out of the garbage collector's
walks, once (ADR 0061): later full collections walk only what came after; and collects
its young generation less often (ADR 0070). A host that embeds the engine does neither,
unless it asks."""

import gc
import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskloom import bootstrap
from taskloom.bootstrap import YOUNG_COLLECTION_EVERY, open_engine
from taskloom.config import TaskloomSettings
from taskloom.persistence.sqlite import SqliteSettings


def _settings(tmp_path: Path, **changes: bool) -> TaskloomSettings:
    return TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "taskloom.db"),
        load_entry_points=False,
        run_sweeper=False,
        **changes,
    )


@pytest.fixture(autouse=True)
def _threshold_kept() -> Iterator[None]:
    """The suite's process keeps its collector's thresholds whatever a test sets."""
    kept = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*kept)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The calls of ``gc.freeze`` from now on, in a process that has not frozen yet."""
    frozen: list[int] = []
    monkeypatch.setattr(bootstrap, "_frozen", False)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    return frozen


async def test_the_first_engine_of_a_process_freezes_start_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = _counted(monkeypatch)
    gc.set_threshold(700, 10, 10)  # Python's default
    settings = _settings(tmp_path, freeze_start_up=True)
    async with open_engine(settings) as engine:
        assert len(frozen) == 1  # once the engine has started, before it is handed out
        assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 10, 10)  # the older kept
        assert engine.worker is not None
    async with open_engine(settings):
        pass
    assert len(frozen) == 1


async def test_an_embedded_engine_does_not_freeze_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = _counted(monkeypatch)
    gc.set_threshold(700, 10, 10)
    async with open_engine(_settings(tmp_path)):
        pass
    assert frozen == []  # the host's garbage stays collectable
    assert gc.get_threshold() == (700, 10, 10)  # and its collector as it set it


@pytest.mark.parametrize("young", [0, YOUNG_COLLECTION_EVERY * 2])
async def test_a_process_that_set_its_collector_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, young: int
) -> None:
    """Collection turned off (0), or already rarer than taskloom's: neither is lowered."""
    _counted(monkeypatch)
    gc.set_threshold(young, 5, 5)
    async with open_engine(_settings(tmp_path, freeze_start_up=True)):
        assert gc.get_threshold() == (young, 5, 5)


@pytest.mark.filterwarnings("ignore:.*fork:DeprecationWarning")  # the child only exits
def test_a_forked_child_freezes_its_own_start_up() -> None:
    assert gc.get_freeze_count() == 0  # this process never froze (tests/conftest.py)
    assert bootstrap._frozen  # but would not: as if it had
    pid = os.fork()
    if pid == 0:  # the child: its first engine would freeze what it holds
        bootstrap._freeze_start_up()
        os._exit(0 if gc.get_freeze_count() > 0 else 1)
    with os.fdopen(os.pidfd_open(pid)) as ended:
        assert select.select([ended], [], [], 30)[0], "the child did not end"
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
