"""`taskloom worker`'s text log (``change_lines``) follows a run while its worker executes
it: a run that leaves the worker without a line (dropped, its lease run out) is not
followed on, so its next claim by the same worker is printed (``running``) again; the
change that made a run leave is printed even when the log reads it after the run left."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.events import TaskSubscription
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.observability.change_lines import log_changes
from taskloom.testing import FakeClock, InMemoryTaskStore
from tests.helpers import eventually

LEASE_S = 60.0


class Empty(BaseModel):
    pass


class _EndFailsOnce:
    """A run store whose first ``finish_run`` fails as an outage does: the run's end does
    not land, and its worker drops the run (no line) and hands its lease back."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name != "finish_run":
            return method

        async def finish_run(*args: Any, **kwargs: Any) -> Any:
            if not self.failed:
                self.failed = True
                raise DatabaseUnavailableError("the test's store is unavailable (finish_run)")
            return await method(*args, **kwargs)

        return finish_run


class _Log:
    """What the log printed of one task, read from ``capsys`` as it comes."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self._text = ""

    def lines(self, task_id: str) -> list[str]:
        self._text += self._capsys.readouterr().err
        return [
            line.split(f" {task_id} ", 1)[1] for line in self._text.splitlines() if task_id in line
        ]

    async def until(self, task_id: str, count: int) -> list[str]:
        """Until *count* lines of *task_id* are printed (bounded); all of them."""

        async def printed() -> bool:
            return len(self.lines(task_id)) >= count

        await eventually(printed)
        return self.lines(task_id)

    def times(self, task_id: str) -> list[str]:
        """The times of *task_id*'s lines."""
        return [line.split("  ", 1)[0] for line in self._text.splitlines() if task_id in line]


def _gated(name: str) -> tuple[Workflow[Empty], list[anyio.Event], list[anyio.Event]]:
    """A one-node workflow whose attempt N signals ``started[N-1]`` and returns once
    ``go[N-1]`` is set (two attempts)."""
    flow = Workflow(name, version="1", input=Empty)
    started, go = [anyio.Event(), anyio.Event()], [anyio.Event(), anyio.Event()]

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        started[ctx.attempt - 1].set()
        await go[ctx.attempt - 1].wait()
        return ctx.attempt

    return flow, started, go


@asynccontextmanager
async def _first_run_logged(
    capsys: pytest.CaptureFixture[str],
    manager: TaskManager,
    worker: Worker,
    flow: Workflow[Empty],
    started: list[anyio.Event],
) -> AsyncIterator[tuple[_Log, Task]]:
    """*worker* and its log running (bounded), a run of *flow* submitted, started and
    printed ``running`` once; both stopped when the block ends."""
    log = _Log(capsys)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            await group.start(log_changes, manager, worker)
            await group.start(worker.run)
            task = await submit(manager, flow, {})
            await started[0].wait()
            assert await log.until(task.id, 1) == ["running"]
            yield log, task
            group.cancel_scope.cancel()


async def test_a_dropped_run_claimed_again_is_printed_running_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flow, started, go = _gated("dropped")
    store = InMemoryTaskStore()
    runs = _EndFailsOnce(cast(RunStore, store))
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=FakeClock())
    settings = WorkerSettings(poll_s=0.01, lease_s=LEASE_S, progress_interval_s=0)
    worker = Worker(manager, {flow.name: flow}, settings=settings)
    async with _first_run_logged(capsys, manager, worker, flow, started) as (log, task):
        go[0].set()  # its end fails: dropped, handed back, claimed again
        await started[1].wait()
        assert runs.failed
        assert await log.until(task.id, 2) == ["running", "running"]
        go[1].set()
        assert await log.until(task.id, 3) == ["running", "running", "completed"]
    assert (await manager.get(task.id)).state is TaskState.COMPLETED


async def test_a_run_whose_lease_ran_out_claimed_again_is_printed_running_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The clock passes the lease with no heartbeat: the worker's next claim takes the
    run again while its first execution still runs (a claim that replaces it). The
    claim leaves the task as it was: its line carries the claim's time, not the task's."""
    flow, started, go = _gated("lapsed")
    store = InMemoryTaskStore()
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    settings = WorkerSettings(
        poll_s=0.01, lease_s=LEASE_S, heartbeat_s=3_600, progress_interval_s=0
    )
    worker = Worker(manager, {flow.name: flow}, settings=settings)
    async with _first_run_logged(capsys, manager, worker, flow, started) as (log, task):
        clock.advance(LEASE_S + 1)
        await started[1].wait()
        assert await log.until(task.id, 2) == ["running", "running"]
        # stamped with the claim's time, though the claim left the task unchanged
        assert log.times(task.id) == ["2026-01-01 00:00:00 UTC", "2026-01-01 00:01:01 UTC"]
        go[1].set()
        assert await log.until(task.id, 3) == ["running", "running", "completed"]
    assert (await manager.get(task.id)).state is TaskState.COMPLETED


class _HeldBack:
    """The log's subscription, delivering nothing until :attr:`go` is set."""

    def __init__(self, subscription: TaskSubscription) -> None:
        self._subscription = subscription
        self.go = anyio.Event()

    def pending(self, task_id: TaskId) -> bool:
        return self._subscription.pending(task_id)

    def __enter__(self) -> Self:
        self._subscription.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._subscription.__exit__(*exc_info)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Task:
        await self.go.wait()
        return await anext(self._subscription)


async def test_a_run_that_left_before_the_log_read_its_change_is_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log is behind: the run is claimed, completes and leaves the worker before the
    log reads any of its changes (the newest, completed, waits for it). It is printed:
    the change that made it leave is its last line."""
    flow = Workflow("quick", version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return 1

    manager = TaskManager(InMemoryTaskStore(), clock=FakeClock())
    subscribe = manager.subscribe
    held: list[_HeldBack] = []

    def held_back(*args: Any, **kwargs: Any) -> _HeldBack:
        held.append(_HeldBack(subscribe(*args, **kwargs)))
        return held[-1]

    worker = Worker(manager, {flow.name: flow}, settings=WorkerSettings(poll_s=0.01))
    log = _Log(capsys)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            monkeypatch.setattr(manager, "subscribe", held_back)
            await group.start(log_changes, manager, worker)
            monkeypatch.setattr(manager, "subscribe", subscribe)
            await group.start(worker.run)
            task = await submit(manager, flow, {})
            await manager.wait_until_terminal(task.id)

            async def left() -> bool:
                return worker.active_runs == 0

            await eventually(left)
            held[0].go.set()
            assert await log.until(task.id, 1) == ["completed"]
            group.cancel_scope.cancel()
