"""``mark_if_first`` over the in-memory store: the process first in order among the live
records marks the runs waiting for a version; the others read nothing (ADR 0068)."""

from collections.abc import Sequence
from datetime import datetime, timedelta

from taskloom.engine.manager import TaskManager
from taskloom.engine.versions import StoredVersion, mark_if_first
from taskloom.testing import FakeClock, InMemoryTaskStore

WAITING = "waiting for a process that has vflow version 9"
MINUTE = timedelta(minutes=1)


class _Counted(InMemoryTaskStore):
    """Counts the reads of the unfinished runs (a pass's grouped read)."""

    reads = 0

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        self.reads += 1
        return await super().unfinished_versions(now)


async def test_only_the_first_live_process_marks() -> None:
    store, clock = _Counted(), FakeClock()
    manager = TaskManager(store, clock=clock)
    waiting = await manager.create("vflow", {}, workflow_version="9")
    now = clock.now()
    for process in ("w2", "w1", "w3"):
        await store.record_loaded(process, [("vflow", "1")], now, now + MINUTE)
    assert await mark_if_first(manager, store, "w2") is None
    assert await mark_if_first(manager, store, "w3") is None
    assert (store.reads, (await manager.get(waiting.id)).status_message) == (0, None)
    assert await mark_if_first(manager, store, "w1") == 1
    assert (store.reads, (await manager.get(waiting.id)).status_message) == (1, WAITING)
    assert await mark_if_first(manager, store, "w1") == 0  # the message is there already


async def test_the_next_process_marks_once_the_first_is_forgotten_or_lapsed() -> None:
    store, clock = _Counted(), FakeClock()
    manager = TaskManager(store, clock=clock)
    now = clock.now()
    await store.record_loaded("w1", [], now, now + MINUTE)
    await store.record_loaded("w2", [], now, now + 3 * MINUTE)
    await store.record_loaded("w3", [], now, now + 3 * MINUTE)
    await store.forget_process("w1")
    assert await mark_if_first(manager, store, "w2") == 0
    assert await mark_if_first(manager, store, "w3") is None
    await store.record_loaded("w0", [], now, now + MINUTE)  # killed: its record stays
    assert await mark_if_first(manager, store, "w2") is None
    clock.advance(MINUTE.total_seconds())  # w0's record lapsed
    assert await mark_if_first(manager, store, "w2") == 0
    assert store.reads == 2


async def test_a_process_with_no_live_record_marks_as_if_alone() -> None:
    store, clock = _Counted(), FakeClock()
    manager = TaskManager(store, clock=clock)
    waiting = await manager.create("vflow", {}, workflow_version="9")
    assert await mark_if_first(manager, store, "w1") == 1
    assert (await manager.get(waiting.id)).status_message == WAITING
