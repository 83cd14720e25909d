"""One process of a fleet marks the runs waiting for a version (ADR 0068), on every store.

Several workers share one store. Each period, the worker whose id is the first of the
live process records reads the unfinished runs and writes "waiting for a process that
has ..." on the runs no live process can take; the others skip that read. When the
marker stops, or its record lapses, the next one takes over.

The workers' heartbeat period is 0.05 s of real time, so a record lapses after 0.15 s of
the fake clock; the marking interval is made 0.05 s of the fake clock, and the test moves
that clock one interval at a time, each time once every worker has decided: no record
lapses because the clock jumped past its next renewal.
"""

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine import worker as worker_module
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.versions import AHEAD_AT_MOST, StoredVersion, VersionStore, mark_if_first
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock
from tests.helpers import eventually

INTERVAL_S = 0.05
"""The marking interval in these tests (the worker's is 15 s), in fake seconds."""
PERIOD = WorkerSettings(
    poll_s=0.05, progress_interval_s=0, input_recheck_s=None, heartbeat_s=INTERVAL_S
)
WAITING = "waiting for a process that has vflow version 9"


class Empty(BaseModel):
    pass


def _vflow() -> Workflow[Empty]:
    flow = Workflow("vflow", version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> str:
        return "version 1"

    return flow


@dataclass
class Passes:
    """What the workers decided, each time their marking was due."""

    decided: list[tuple[datetime, str, bool]] = field(default_factory=list)
    """(when, worker, whether it marked)."""
    reads: list[datetime] = field(default_factory=list)
    """When the unfinished runs were read (the grouped read a pass makes)."""

    def marked_at(self, when: datetime) -> list[str]:
        return [worker for at, worker, marked in self.decided if at == when and marked]

    def reads_at(self, when: datetime) -> int:
        return sum(1 for at in self.reads if at == when)

    async def all_decided(self, workers: Sequence[str], when: datetime) -> None:
        async def decided() -> bool:
            done = {worker for at, worker, _ in self.decided if at == when}
            return done >= set(workers)

        await eventually(decided, within_s=10)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch, manager: TaskManager, store: TaskStore) -> Passes:
    """Every worker's decision, and every read of the unfinished runs, by fake time."""
    found = Passes()
    monkeypatch.setattr(worker_module, "_MARK_EVERY_S", INTERVAL_S)
    decide = mark_if_first

    async def recorded(manager: TaskManager, store: VersionStore, process: str) -> int | None:
        when = manager.clock.now()
        marked = await decide(manager, store, process)
        found.decided.append((when, process, marked is not None))
        return marked

    monkeypatch.setattr(worker_module, "mark_if_first", recorded)
    versions = cast(VersionStore, store)
    read = versions.unfinished_versions

    async def counted(now: datetime) -> Sequence[StoredVersion]:
        found.reads.append(now)
        return await read(now)

    monkeypatch.setattr(versions, "unfinished_versions", counted)
    return found


@asynccontextmanager
async def _worker(manager: TaskManager, worker_id: str) -> AsyncIterator[None]:
    """A worker of vflow version 1 with this id; it has decided once when this enters."""
    worker = Worker(manager, {"vflow": _vflow()}, settings=PERIOD, worker_id=worker_id)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield
        task_group.cancel_scope.cancel()


async def _next_interval(clock: FakeClock, passes: Passes, workers: Sequence[str]) -> datetime:
    """Move the clock one marking interval; return the new time once every worker of
    *workers* has decided at it."""
    clock.advance(INTERVAL_S)
    now = clock.now()
    await passes.all_decided(workers, now)
    return now


async def test_one_worker_of_four_marks_each_period(
    manager: TaskManager, store: TaskStore, clock: FakeClock, passes: Passes
) -> None:
    waiting = await manager.create("vflow", {}, workflow_version="9")
    workers = ["w1", "w2", "w3", "w4"]
    async with AsyncExitStack() as stack:
        for worker in workers:  # each decides as it starts: only w1 is first
            await stack.enter_async_context(_worker(manager, worker))
        start = clock.now()
        assert passes.marked_at(start) == ["w1"]
        assert passes.reads_at(start) == 1
        assert (await manager.get(waiting.id)).status_message == WAITING
        for _ in range(3):
            now = await _next_interval(clock, passes, workers)
            assert passes.marked_at(now) == ["w1"]
            assert passes.reads_at(now) == 1


async def test_the_next_worker_marks_once_the_marker_stops(
    manager: TaskManager, store: TaskStore, clock: FakeClock, passes: Passes
) -> None:
    async with AsyncExitStack() as rest:
        for worker in ("w2", "w3"):
            await rest.enter_async_context(_worker(manager, worker))
        async with _worker(manager, "w1"):  # it joins first in order: it marks from now on
            now = await _next_interval(clock, passes, ["w1", "w2", "w3"])
            assert passes.marked_at(now) == ["w1"]
        # w1 stopped and deleted its record: a run now waits for a version nobody has
        waiting = await manager.create("vflow", {}, workflow_version="9")
        now = await _next_interval(clock, passes, ["w2", "w3"])
        assert passes.marked_at(now) == ["w2"]
        assert passes.reads_at(now) == 1
        assert (await manager.get(waiting.id)).status_message == WAITING


async def test_the_next_worker_marks_once_the_markers_record_lapses(
    manager: TaskManager, store: TaskStore, clock: FakeClock, passes: Passes
) -> None:
    """A marker killed without deleting its record (here a record written directly, of a
    process id first in order): nobody marks until the record lapses, then the next does."""
    versions = cast(VersionStore, store)
    workers = ["w1", "w2"]
    async with AsyncExitStack() as stack:
        for worker in workers:
            await stack.enter_async_context(_worker(manager, worker))
        waiting = await manager.create("vflow", {}, workflow_version="9")
        now = clock.now()
        lapses = now + timedelta(seconds=2.5 * INTERVAL_S)
        await versions.record_loaded("a-killed", [("vflow", "1")], now, lapses)
        for _ in range(2):  # the killed process's record is live: it would mark
            now = await _next_interval(clock, passes, workers)
            assert passes.marked_at(now) == []
            assert passes.reads_at(now) == 0
        assert (await manager.get(waiting.id)).status_message is None
        now = await _next_interval(clock, passes, workers)  # it has lapsed
        assert now >= lapses
        assert passes.marked_at(now) == ["w1"]
        assert (await manager.get(waiting.id)).status_message == WAITING


async def test_the_store_names_the_first_live_process(
    manager: TaskManager, store: TaskStore
) -> None:
    versions = cast(VersionStore, store)
    now = manager.clock.now()
    minute = timedelta(minutes=1)
    assert await versions.first_live_process(now) is None
    await versions.record_loaded("b", [("vflow", "1")], now, now + 2 * minute)
    await versions.record_loaded("a", [("vflow", "1")], now, now + minute)
    await versions.record_loaded("c", [], now, now + 3 * minute)
    assert await versions.first_live_process(now) == "a"
    assert await versions.first_live_process(now + minute) == "b"  # a's record lapsed
    await versions.forget_process("b")
    assert await versions.first_live_process(now) == "a"
    assert await versions.first_live_process(now + minute) == "c"
    assert await versions.first_live_process(now + 3 * minute) is None


async def test_a_record_from_a_clock_that_ran_ahead_does_not_choose_the_marker(
    manager: TaskManager, store: TaskStore
) -> None:
    """A process whose clock runs ahead writes records seen, and lapsing, in the others'
    future: dead, it would stop every pass until its record lapsed by their clocks. Seen
    more than ``AHEAD_AT_MOST`` ahead, it takes no part in the choice; up to it, it does."""
    versions = cast(VersionStore, store)
    now = manager.clock.now()
    ahead = now + AHEAD_AT_MOST + timedelta(seconds=1)
    await versions.record_loaded("a-ahead", [("vflow", "2")], ahead, ahead + timedelta(hours=1))
    await versions.record_loaded("b", [("vflow", "1")], now, now + timedelta(minutes=1))
    assert await versions.first_live_process(now) == "b"
    assert await versions.live_versions(now) == {("vflow", "1"), ("vflow", "2")}  # as before
    assert await versions.first_live_process(ahead) == "a-ahead"  # by its own clock
    slightly = now + AHEAD_AT_MOST
    await versions.record_loaded("a-ahead", [], slightly, slightly + timedelta(hours=1))
    assert await versions.first_live_process(now) == "a-ahead"


async def test_a_worker_first_in_order_marks_as_it_joins(
    manager: TaskManager, clock: FakeClock, passes: Passes
) -> None:
    """A worker records itself before its first pass: joining a fleet with an id first in
    order, that pass is its own (point 4 of ADR 0068). (A review's test.)"""
    async with AsyncExitStack() as stack:
        for worker in ("w2", "w3"):
            await stack.enter_async_context(_worker(manager, worker))
        joined = clock.now()
        await stack.enter_async_context(_worker(manager, "w1"))
        assert "w1" in passes.marked_at(joined)
