"""Other processes' changes on a store that cannot announce them (SQLite): a poll of the
running tasks publishes them on this process's change feed (issue 26, ADR 0042).

Two managers on one in-memory store stand for two processes: each has its own feed, so
what one writes reaches the other's feed only through the poll."""

from collections.abc import AsyncIterator

import anyio
import pytest

from taskloom.engine.foreign import follow_foreign_changes
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.memory import InMemoryTaskStore

INTERVAL_S = 0.02


@pytest.fixture
async def processes() -> AsyncIterator[tuple[TaskManager, TaskManager]]:
    store = InMemoryTaskStore()
    here, elsewhere = TaskManager(store), TaskManager(store)

    async def running() -> dict[TaskId, int]:
        page = await elsewhere.list(states=[TaskState.RUNNING])
        return {task.id: task.version for task in page.tasks}

    async with anyio.create_task_group() as group:
        await group.start(follow_foreign_changes, here, running, INTERVAL_S)
        yield here, elsewhere
        group.cancel_scope.cancel()


async def _until(feed: AsyncIterator[Task], state: TaskState) -> list[Task]:
    seen = []
    with anyio.fail_after(5):
        async for task in feed:
            seen.append(task)
            if task.state is state:
                return seen
    raise AssertionError("the feed ended")


async def test_a_run_this_process_started_and_another_cancelled_at_once_is_published(
    processes: tuple[TaskManager, TaskManager],
) -> None:
    here, elsewhere = processes
    task = await here.create("job")
    with here.subscribe() as feed:
        await here.start(task.id)  # this process's claim, on its own feed
        await elsewhere.cancel(task.id)  # before any poll saw it running
        seen = await _until(feed, TaskState.CANCELLED)
    assert [each.state for each in seen] == [TaskState.RUNNING, TaskState.CANCELLED]


async def test_another_processes_run_is_followed_from_start_to_cancel(
    processes: tuple[TaskManager, TaskManager],
) -> None:
    here, elsewhere = processes
    task = await elsewhere.create("job")
    with here.subscribe() as feed:
        await elsewhere.start(task.id)
        await _until(feed, TaskState.RUNNING)
        await elsewhere.report_progress(task.id, completed=1, total=2, message="half")
        progressed = await _until(feed, TaskState.RUNNING)
        assert progressed[-1].status_message == "half"
        await elsewhere.cancel(task.id)
        await _until(feed, TaskState.CANCELLED)


async def test_this_processes_own_writes_are_not_published_twice(
    processes: tuple[TaskManager, TaskManager],
) -> None:
    here, _ = processes
    task = await here.create("job")
    with here.subscribe() as feed:
        await here.start(task.id)
        await here.report_progress(task.id, completed=1, total=2, message="half")
        await anyio.sleep(5 * INTERVAL_S)  # polls see it running
        await here.cancel(task.id)
        versions: list[int] = []

        async def drain() -> None:
            async for each in feed:
                versions.append(each.version)  # noqa: PERF401  # kept as they come: a cancel ends it

        with anyio.move_on_after(10 * INTERVAL_S):  # polls that find nothing new to say
            await drain()
    assert versions[-1] == 4
    assert len(versions) == len(set(versions))  # never twice


async def test_a_run_here_that_polls_saw_running_and_another_cancelled_is_published(
    processes: tuple[TaskManager, TaskManager],
) -> None:
    here, elsewhere = processes
    task = await here.create("job")
    with here.subscribe() as feed:
        await here.start(task.id)
        await anyio.sleep(5 * INTERVAL_S)  # polls see it running, as this process's own
        await elsewhere.cancel(task.id)
        seen = await _until(feed, TaskState.CANCELLED)
    assert [each.state for each in seen] == [TaskState.RUNNING, TaskState.CANCELLED]


async def test_a_run_this_process_ended_is_not_read_again_by_the_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = InMemoryTaskStore()
    here, elsewhere = TaskManager(store), TaskManager(store)
    polls = 0
    polled = anyio.Event()
    wanted = 0

    async def running() -> dict[TaskId, int]:
        nonlocal polls
        polls += 1
        if polls >= wanted:
            polled.set()
        page = await elsewhere.list(states=[TaskState.RUNNING])
        return {task.id: task.version for task in page.tasks}

    async def polls_done(count: int) -> None:
        nonlocal wanted, polled
        wanted, polled = polls + count, anyio.Event()
        with anyio.fail_after(5):
            await polled.wait()

    reads: list[str] = []
    get = here.get

    async def counted_get(task_id: str) -> Task:
        reads.append(task_id)
        return await get(task_id)

    monkeypatch.setattr(here, "get", counted_get)
    async with anyio.create_task_group() as group:
        await group.start(follow_foreign_changes, here, running, INTERVAL_S)
        task = await here.create("job")
        await here.start(task.id)
        await polls_done(2)  # a poll saw it running
        await here.cancel(task.id)
        await polls_done(3)  # and later ones found it gone from the running set
        group.cancel_scope.cancel()
    assert reads == []
