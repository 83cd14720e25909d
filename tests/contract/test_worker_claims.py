"""How often a worker asks its store for work: once per announced task, not once per run end."""

from collections.abc import Sequence
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import ClaimedRun, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings

QUIET = WorkerSettings(poll_s=3600, progress_interval_s=0, input_recheck_s=None)
"""No polling during a test: every claim is one the worker chose to make."""


class Empty(BaseModel):
    pass


class CountingRuns:
    """A RunStore that counts claim_runs calls and passes everything through."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.claims = 0

    async def claim_runs(self, **kwargs: Any) -> Sequence[ClaimedRun]:
        self.claims += 1
        return await self._runs.claim_runs(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runs, name)


def _noop() -> Workflow[Empty]:
    flow = Workflow("noop", version="1", input=Empty)

    @flow.node()
    async def answer(ctx: NodeContext[Empty]) -> str:
        return "ok"

    return flow


async def _worker(
    manager: TaskManager, store: TaskStore, flow: Workflow[Empty], max_runs: int
) -> tuple[Worker, CountingRuns]:
    """A worker whose claims are counted, on a manager over *manager*'s store and clock
    whose run store counts them (use the worker's ``manager`` from then on)."""
    counting = CountingRuns(cast(RunStore, store))
    settings = QUIET.model_copy(update={"max_runs": max_runs})
    counted = TaskManager(store, runs=cast(RunStore, counting), clock=manager.clock)
    worker = Worker(counted, {flow.name: flow}, settings=settings)
    return worker, counting


@pytest.mark.anyio
async def test_a_run_that_ends_does_not_send_the_worker_looking_for_work(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = _noop()
    worker, counting = await _worker(manager, store, flow, max_runs=10)
    manager = worker.manager
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        for _ in range(5):
            task = await submit(manager, flow)
            with anyio.fail_after(20):
                done = await manager.wait_until_terminal(task.id)
            assert done.state is TaskState.COMPLETED
        task_group.cancel_scope.cancel()
    # one claim at start, at most one per announced task; none for the five run ends
    assert counting.claims <= 1 + 5


@pytest.mark.anyio
async def test_work_left_waiting_for_a_free_slot_is_taken_when_one_frees_up(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = _noop()
    worker, counting = await _worker(manager, store, flow, max_runs=1)
    manager = worker.manager
    tasks = [await submit(manager, flow) for _ in range(4)]  # queued before the worker starts
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        with anyio.fail_after(20):
            for task in tasks:
                done = await manager.wait_until_terminal(task.id)
                assert done.state is TaskState.COMPLETED
        task_group.cancel_scope.cancel()
    assert counting.claims >= 4
