"""A heartbeat's renewal does not judge runs claimed while it was under way.

On PostgreSQL a renewal (``UPDATE leases ... WHERE worker = ...``) does not see a claim
that commits after the statement began; a worker that read that answer as "lease lost"
stopped the new run without handing it back, and its later heartbeats then kept the
orphaned lease alive, so the run never ran again.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, ClaimedRun, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings


class Empty(BaseModel):
    pass


class RenewalOverlappingAClaim:
    """The store, with its first renewal answered as of before the next claim: the renewal
    runs, then waits until a claim has returned before it answers."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.renewing = anyio.Event()
        self.claimed = anyio.Event()
        self.answered = anyio.Event()
        self.looked = anyio.Event()
        """The worker's first claim returned (it found the queue empty)."""
        self.eager_claims = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def claim_runs(self, **arguments: Any) -> Sequence[ClaimedRun]:
        claimed = await self._store.claim_runs(**arguments)
        self.looked.set()
        if claimed:
            self.claimed.set()
        return claimed

    async def create_claimed(self, *arguments: Any) -> tuple[Task, ClaimedRun | None]:
        stored, run = await self._store.create_claimed(*arguments)
        if run is not None:  # eager start: the create claimed the run
            self.eager_claims += 1
            self.claimed.set()
        return stored, run

    async def renew_leases(
        self, *, worker: str, now: datetime, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        held = await self._store.renew_leases(worker=worker, now=now, lease_for=lease_for)
        if not self.answered.is_set():
            self.renewing.set()
            await self.claimed.wait()
            self.answered.set()
        return held


@pytest.mark.parametrize("eager", [False, True], ids=["queued", "eager"])
async def test_a_run_claimed_during_a_renewal_keeps_running(
    manager: TaskManager, store: TaskStore, eager: bool
) -> None:
    """Claimed from the queue, or by its own create (eager start, ADR 0046)."""
    release = anyio.Event()
    flow = Workflow("held", version="1", input=Empty)

    @flow.node()
    async def wait(ctx: NodeContext[Empty]) -> int:
        await release.wait()
        return 1

    runs = RenewalOverlappingAClaim(cast(RunStore, store))
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=manager.clock)
    worker = Worker(
        manager,
        {flow.name: flow},
        settings=WorkerSettings(
            poll_s=60, heartbeat_s=0.01, progress_interval_s=0, eager_start=eager
        ),
    )
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await runs.looked.wait()
            await runs.renewing.wait()  # a renewal has read the leases (none yet)
            task = await submit(manager, flow, {})
            await runs.answered.wait()  # ... and answered after the claim of *task*
            with manager.subscribe([task.id]) as changes:
                while (await manager.get(task.id)).state is not TaskState.RUNNING:
                    await changes.receive()
            release.set()
            done = await manager.wait_until_terminal(task.id)
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED
    assert runs.eager_claims == (1 if eager else 0)
    attempts = await cast(RunStore, store).attempts(task.id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.COMPLETED]
