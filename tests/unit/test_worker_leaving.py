"""A listener of runs leaving the worker (``Worker.leaving``) that raises is logged and
does not stop the worker: the next runs are claimed and executed (a review found that an
exception there would end the worker's task group)."""

import anyio
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import InMemoryTaskStore
from taskloom.workflows.countdown import countdown

QUICK = {"start": 1, "tick_s": 0}


async def test_a_listener_that_raises_is_logged_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager = TaskManager(InMemoryTaskStore())
    worker = Worker(manager, {countdown.name: countdown}, settings=WorkerSettings(poll_s=600))
    left: list[str] = []

    def broken(task_id: str) -> None:
        left.append(task_id)
        raise RuntimeError("a broken listener")

    with anyio.fail_after(10), worker.leaving(broken):
        async with anyio.create_task_group() as group:
            await group.start(worker.run)
            first = await manager.create(countdown.name, QUICK)
            assert (await manager.wait_until_terminal(first.id)).state is TaskState.COMPLETED
            second = await manager.create(countdown.name, QUICK)
            assert (await manager.wait_until_terminal(second.id)).state is TaskState.COMPLETED
            group.cancel_scope.cancel()
    assert first.id in left
    assert "a listener of runs leaving failed" in caplog.text
