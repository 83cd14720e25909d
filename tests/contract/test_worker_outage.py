"""A worker outlives a store that fails for longer than its retries, on every store.

The run store is wrapped so that every call fails with ``DatabaseUnavailableError`` (what
the PostgreSQL store raises once ``retry_s`` is spent) while the test says the database
is down. Heartbeats and claims fail, then the running node's end fails and the run is
dropped; once the store answers, the worker hands the run's lease back, claims it again
and finishes it. The fake clock never moves, so no lease expires: only the hand-back
makes the run claimable again.
"""

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from tests.contract.harness import finish, run_store
from tests.helpers import eventually

_RUN_METHODS = frozenset(
    {"claim_runs", "renew_leases", "release_lease", "start_node", "end_node", "finish_run"}
)


class FlakyRuns:
    """A run store that fails every call while :attr:`down` is set, counting failures."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.down = False
        self.failures: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if name not in _RUN_METHODS:
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.failures[name] += 1
                raise DatabaseUnavailableError(f"PostgreSQL test is unavailable ({name})")
            return await method(*args, **kwargs)

        return call


async def _until(condition: Callable[[], bool]) -> None:
    """Poll *condition* (counters and log records publish no event) until it holds."""

    async def holds() -> bool:
        return condition()

    await eventually(holds, every_s=0.005)


class Empty(BaseModel):
    pass


async def test_a_worker_outlives_a_store_outage_and_finishes_the_run(
    manager: TaskManager, store: TaskStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="taskloom.engine.worker")
    running = anyio.Event()
    gate = anyio.Event()
    calls: list[int] = []
    flow = Workflow("outage", version="1", input=Empty)

    @flow.node()
    async def across(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        running.set()
        await gate.wait()
        return ctx.attempt

    runs = FlakyRuns(run_store(store))
    settings = WorkerSettings(poll_s=0.01, heartbeat_s=0.01, lease_s=60, progress_interval_s=0)
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=manager.clock)
    worker = Worker(manager, {flow.name: flow}, settings=settings)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            task = await submit(manager, flow, {})
            await running.wait()

            runs.down = True
            await _until(lambda: runs.failures["renew_leases"] >= 3)
            await _until(lambda: runs.failures["claim_runs"] >= 3)
            gate.set()  # the node returns while the store is down: its end cannot land
            await _until(lambda: worker.active_runs == 0)  # the run was dropped
            assert runs.failures["finish_run"] >= 1
            runs.down = False

            done = await finish(manager, task)
            task_group.cancel_scope.cancel()

    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == 2
    assert calls == [1, 2]  # at least once: the first end never landed
    history = await run_store(store).attempts(task.id)
    assert [(a.attempt, a.outcome, a.worker) for a in history] == [
        (1, AttemptOutcome.INTERRUPTED, worker.worker_id),
        (2, AttemptOutcome.COMPLETED, worker.worker_id),
    ]
    mine = [record for record in caplog.records if record.name == "taskloom.engine.worker"]
    logged = [(record.levelno, record.getMessage()) for record in mine]
    # the store announces an outage once; the worker's own lines about it stay quiet
    assert any("heartbeat failed" in line for _, line in logged), logged
    assert any("claim failed" in line for _, line in logged), logged
    assert any("dropped run" in line for _, line in logged), logged
    assert all(level < logging.WARNING for level, _ in logged), logged
    assert not any(record.exc_info for record in mine)
