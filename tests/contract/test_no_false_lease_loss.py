"""A run that drops its own lease (it parks, or it ends) never reads as a lost lease
(ADR 0038): the ``lease_lost`` seen with no outage just after servers start was a
heartbeat that ran while such a write had committed but its caller had not yet heard
back; it stopped the run as if another worker had taken it over."""

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import LeaseLostError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId, TaskMutation
from taskloom.engine.observe import RunInfo
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import Lease
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker
from taskloom.testing import FakeClock
from tests.contract.harness import FAST, finish
from tests.observability.recording import RecordingObserver


class SlowToHearBack:
    """A task store whose fenced writes that park a run answer late: the write has
    committed (the lease is gone) before its caller hears of it."""

    def __init__(self, store: TaskStore, delay_s: float) -> None:
        self._store = store
        self._delay_s = delay_s
        self.late_answers = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def update(
        self, task_id: TaskId, now: Any, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        task = await self._store.update(task_id, now, mutate, fence)
        if fence is not None and task.parked:
            self.late_answers += 1
            await anyio.sleep(self._delay_s)  # heartbeats run meanwhile
        return task


class Empty(BaseModel):
    pass


async def test_a_run_that_parks_as_a_heartbeat_runs_has_not_lost_its_lease(
    store: TaskStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    flow = Workflow("naps", version="1", input=Empty)

    @flow.node()
    async def nap(ctx: NodeContext[Empty]) -> str:
        await ctx.sleep(30)
        return "rested"

    observer = RecordingObserver()
    slow = SlowToHearBack(store, delay_s=0.3)
    manager = TaskManager(slow, runs=store, clock=clock, observer=observer)  # type: ignore[arg-type]
    settings = FAST.model_copy(update={"heartbeat_s": 0.02})
    worker = Worker(manager, {flow.name: flow}, settings=settings, worker_id="w1")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            task = await submit(manager, flow, {})
            parked = await _until_parked(manager, task)
            assert parked.parked
            clock.advance(31)
            worker.wake()
            done = await finish(manager, task)
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    assert slow.late_answers >= 1
    outcomes = [details[1] for details in observer.named("run_ended")]
    assert outcomes == ["parked", "completed"], outcomes
    assert not [r for r in caplog.records if "lost the lease" in r.getMessage()]


async def _until_parked(manager: TaskManager, task: Task) -> Task:
    with anyio.fail_after(20), manager.subscribe([task.id]) as changes:
        current = await manager.get(task.id)
        while not current.parked:
            current = await changes.receive()
        return current


class LateProgress:
    """A task store whose fenced updates (progress writes) reach it late: the run's last
    node commits the result, dropping the lease, before a progress write sent earlier."""

    def __init__(self, store: TaskStore, delay_s: float) -> None:
        self._store = store
        self._delay_s = delay_s
        self.refused = 0
        self.sent = anyio.Event()
        """Set once a progress write is under way."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def update(
        self, task_id: TaskId, now: Any, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        if fence is not None:
            self.sent.set()
            await anyio.sleep(self._delay_s)
        try:
            return await self._store.update(task_id, now, mutate, fence)
        except LeaseLostError:
            self.refused += 1
            raise


class EndsRecorded(RecordingObserver):
    """Says when a run's end has been recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.run_over = anyio.Event()

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        super().run_ended(run, outcome, duration_s)
        self.run_over.set()


async def test_a_progress_write_refused_after_the_result_leaves_the_run_completed(
    store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("two-steps", version="1", input=Empty)

    @flow.node(phase="first")
    async def first(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(phase="second", deps=[first])
    async def second(ctx: NodeContext[Empty]) -> int:
        await late.sent.wait()  # the progress write of the first phase is under way
        return 2

    observer = EndsRecorded()
    late = LateProgress(store, delay_s=0.3)
    manager = TaskManager(late, runs=store, clock=clock, observer=observer)  # type: ignore[arg-type]
    worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w1")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            task = await submit(manager, flow, {})
            done = await finish(manager, task)
            await observer.run_over.wait()
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    assert late.refused == 1  # the progress write of the first phase came too late
    outcomes = [details[1] for details in observer.named("run_ended")]
    assert outcomes == ["completed"], outcomes
