"""A cancel another process announces while this worker's claim of the run is in flight
(committed, the run not adopted yet) still stops the run (a review found it lost: the
announcement found no execution to stop, and the run went on until its lease's
heartbeat)."""

from typing import Any

import anyio
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import ClaimedRun
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.observability.change_lines import log_changes
from taskloom.testing import InMemoryTaskStore
from taskloom.workflows.countdown import countdown
from tests.helpers import eventually

SLOW = {"start": 2, "tick_s": 60}  # a lane sleeps a minute between writes: only a stop ends it


async def test_a_cancel_announced_while_the_claim_returns_stops_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = InMemoryTaskStore()
    here, elsewhere = TaskManager(store), TaskManager(store)  # two processes on one store
    settings = WorkerSettings(poll_s=0.05, eager_start=False, lease_s=600)  # no heartbeat soon
    worker = Worker(here, {countdown.name: countdown}, settings=settings)
    claim_runs = here.runs.claim_runs
    announced = anyio.Event()

    async def claimed_then_cancelled_elsewhere(**terms: Any) -> list[ClaimedRun]:
        claimed = list(await claim_runs(**terms))
        for run in claimed:  # committed; the other process cancels; its NOTIFY comes first
            await elsewhere.cancel(run.task.id, reason="cancelled elsewhere")
            await here.notice(run.task.id, "cancelled")
            announced.set()
        return claimed

    here.runs.claim_runs = claimed_then_cancelled_elsewhere  # type: ignore[method-assign]
    printed: list[str] = []

    async def stopped() -> bool:
        printed.append(capsys.readouterr().err)
        return worker.active_runs == 0 and "cancelled elsewhere" in "".join(printed)

    async with anyio.create_task_group() as group:
        await group.start(log_changes, here, worker)
        await group.start(worker.run)
        task = await elsewhere.create(countdown.name, SLOW)
        with anyio.fail_after(10):
            await announced.wait()
        await eventually(stopped)
        group.cancel_scope.cancel()
    assert (await here.get(task.id)).state is TaskState.CANCELLED
    log = "".join(printed)
    assert f"countdown {task.id} running" in log, log
    assert f"countdown {task.id} cancelled: cancelled elsewhere" in log, log
