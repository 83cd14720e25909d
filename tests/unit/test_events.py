"""The in-process change feed."""

from functools import partial
from typing import Any

import anyio
import pytest

from taskloom.engine.errors import IllegalTransitionError
from taskloom.engine.events import ChangeFeed, Wants
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskFailure, TaskId
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock, InMemoryTaskStore


@pytest.fixture
def memory_manager() -> TaskManager:
    return TaskManager(InMemoryTaskStore(), clock=FakeClock())


async def test_a_subscriber_sees_every_committed_change_in_order(
    memory_manager: TaskManager,
) -> None:
    with memory_manager.subscribe() as subscription:
        first = await memory_manager.create("a")
        second = await memory_manager.create("b")
        await memory_manager.start(first.id)
        with anyio.fail_after(5):
            seen = [await subscription.receive() for _ in range(2)]
    # `first` changed twice before it was read: only its newest version is delivered.
    assert [(task.id, task.version) for task in seen] == [(first.id, 2), (second.id, 1)]


async def test_a_slow_subscriber_keeps_only_the_newest_version_of_each_task(
    memory_manager: TaskManager,
) -> None:
    task = await memory_manager.create("a")
    with memory_manager.subscribe([task.id]) as subscription:
        await memory_manager.start(task.id)
        for step in range(100):
            await memory_manager.report_progress(task.id, completed=step)
        await memory_manager.complete(task.id, "done")
        with anyio.fail_after(5):
            latest = await subscription.receive()
    assert latest.is_terminal
    assert latest.result == "done"


async def test_a_filtered_subscription_ignores_other_tasks(memory_manager: TaskManager) -> None:
    watched = await memory_manager.create("watched")
    other = await memory_manager.create("other")
    with memory_manager.subscribe([watched.id]) as subscription:
        await memory_manager.start(other.id)
        await memory_manager.start(watched.id)
        with anyio.fail_after(5):
            seen = await subscription.receive()
    assert seen.id == watched.id


async def test_closing_a_subscription_ends_a_waiting_receive() -> None:
    feed = ChangeFeed()
    subscription = feed.subscribe()
    received: list[object] = []

    async def consume() -> None:
        received.extend([task async for task in subscription])

    with anyio.fail_after(5):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            subscription.close()
    assert received == []
    assert feed.subscriber_count == 0


async def test_refused_writes_are_not_published(memory_manager: TaskManager) -> None:
    task = await memory_manager.create("a")
    await memory_manager.start(task.id)
    await memory_manager.complete(task.id)
    with memory_manager.subscribe() as subscription:
        with pytest.raises(IllegalTransitionError):
            await memory_manager.cancel(task.id)
        assert subscription.pending_count == 0  # nothing committed, nothing delivered
    assert memory_manager.feed.subscriber_count == 0


async def test_wait_until_terminal_wakes_on_the_change_not_by_polling(
    memory_manager: TaskManager,
) -> None:
    task = await memory_manager.create("a")
    outcome: list[str] = []

    async def waiter() -> None:
        finished = await memory_manager.wait_until_terminal(task.id)
        outcome.append(finished.state)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            await memory_manager.start(task.id)
            await anyio.wait_all_tasks_blocked()
            assert outcome == []
            await memory_manager.fail(task.id, TaskFailure(code="boom", message="it broke"))
    assert outcome == ["failed"]


async def test_watch_yields_the_task_then_each_newer_version_and_ends_when_terminal(
    memory_manager: TaskManager,
) -> None:
    task = await memory_manager.create("a")
    seen: list[tuple[str, int]] = []

    async def watcher() -> None:
        seen.extend(
            [(snapshot.state, snapshot.version) async for snapshot in memory_manager.watch(task.id)]
        )

    with anyio.fail_after(5):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(watcher)
            await anyio.wait_all_tasks_blocked()
            await memory_manager.start(task.id)
            await anyio.wait_all_tasks_blocked()
            await memory_manager.complete(task.id, "done")
    assert seen == [("queued", 1), ("running", 2), ("completed", 3)]
    assert memory_manager.feed.subscriber_count == 0


async def test_watch_of_a_terminal_task_yields_it_once(memory_manager: TaskManager) -> None:
    task = await memory_manager.create("a")
    await memory_manager.cancel(task.id)
    with anyio.fail_after(5):
        seen = [snapshot.state async for snapshot in memory_manager.watch(task.id)]
    assert seen == ["cancelled"]


async def test_task_and_global_subscribers_each_get_every_change_in_order(
    memory_manager: TaskManager,
) -> None:
    first, second, third = [await memory_manager.create(name) for name in "abc"]
    feed = memory_manager.feed
    gone = memory_manager.subscribe([first.id])
    gone.close()
    subscriptions = {
        "all": memory_manager.subscribe(),
        "first": memory_manager.subscribe([first.id]),
        "both": memory_manager.subscribe([second.id, first.id, first.id]),
        "early": memory_manager.subscribe([first.id]),
    }
    assert feed.subscriber_count == 4
    seen: dict[str, list[tuple[str, int]]] = {name: [] for name in subscriptions}
    changes = [
        partial(memory_manager.start, second.id),
        partial(memory_manager.start, first.id),
        partial(memory_manager.start, third.id),
        partial(memory_manager.report_progress, first.id, completed=1),
        partial(memory_manager.complete, first.id, "done"),
    ]
    with anyio.fail_after(5):
        for number, change in enumerate(changes):
            await change()
            for name, subscription in subscriptions.items():
                while subscription.pending_count:  # one change, received at once
                    task = await subscription.receive()
                    seen[name].append((task.id, task.version))
            if number == 1:
                subscriptions["early"].close()  # the others on the same task go on
                assert feed.subscriber_count == 3
    for subscription in subscriptions.values():
        subscription.close()
    firsts = [(first.id, 2), (first.id, 3), (first.id, 4)]
    assert seen["all"] == [(second.id, 2), firsts[0], (third.id, 2), *firsts[1:]]
    assert seen["first"] == firsts
    assert seen["both"] == [(second.id, 2), *firsts]
    assert seen["early"] == firsts[:1]
    assert gone.pending_count == 0
    assert feed.subscriber_count == 0


async def test_a_waiting_receiver_wakes_again_after_draining_a_backlog(
    memory_manager: TaskManager,
) -> None:
    received: list[str] = []
    with memory_manager.subscribe() as subscription:

        async def consume() -> None:
            received.extend([(await subscription.receive()).name for _ in range(4)])

        with anyio.fail_after(5):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(consume)
                await anyio.wait_all_tasks_blocked()
                await memory_manager.create("a")  # wakes the waiting receiver
                await memory_manager.create("b")  # queued behind it, before it runs
                await anyio.wait_all_tasks_blocked()
                await memory_manager.create("c")
                await memory_manager.create("d")
    assert received == ["a", "b", "c", "d"]


async def test_a_receive_cancelled_while_waiting_leaves_the_subscription_usable(
    memory_manager: TaskManager,
) -> None:
    with memory_manager.subscribe() as subscription:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(subscription.receive)
                await anyio.wait_all_tasks_blocked()
                waiting.cancel_scope.cancel()  # cancelled while waiting: nothing changed
        received: list[str] = []

        async def consume() -> None:
            received.append((await subscription.receive()).name)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(consume)
                await anyio.wait_all_tasks_blocked()
                await memory_manager.create("a")
    assert received == ["a"]


async def test_another_process_change_is_read_only_when_a_subscription_wants_it(
    memory_manager: TaskManager,
) -> None:
    """PostgreSQL announces every task change to every process: a change nobody here
    follows is not read (a worker would otherwise read each claim and end of the others)."""
    task = await memory_manager.create("job")
    reads = 0
    get = memory_manager.get

    async def counting_get(task_id: str, **kwargs: Any) -> Task:
        nonlocal reads
        reads += 1
        return await get(task_id, **kwargs)

    memory_manager.get = counting_get  # type: ignore[method-assign]
    queued_only: Wants = lambda task_id, state: state is TaskState.QUEUED
    with memory_manager.subscribe(wants=queued_only) as everything:
        await memory_manager.notice(task.id, "running")
        assert (reads, everything.pending_count) == (0, 0)
        await memory_manager.notice(task.id, "queued")
        assert (reads, everything.pending_count) == (1, 1)
        await memory_manager.notice(task.id)  # no state given: read
        await memory_manager.notice(task.id, "no-such-state")  # not understood: read
        assert reads == 3
        with memory_manager.subscribe([task.id]) as one:  # following that task: read
            await memory_manager.notice(task.id, "completed")
            assert (reads, one.pending_count) == (4, 1)
    with memory_manager.subscribe():  # no wants: every change is read
        await memory_manager.notice(task.id, "completed")
    assert reads == 5
    await memory_manager.notice(task.id, "queued")  # no subscription at all
    assert reads == 5


def test_the_feed_says_which_announced_changes_are_wanted() -> None:
    feed = ChangeFeed()
    one, other = TaskId("t-1"), TaskId("t-2")
    assert not feed.wanted(one, TaskState.RUNNING)
    with feed.subscribe([one]):
        assert feed.wanted(one, TaskState.RUNNING)
        assert not feed.wanted(other, TaskState.RUNNING)
        with feed.subscribe(wants=lambda task_id, state: task_id == other):
            assert feed.wanted(other, TaskState.COMPLETED)
            assert not feed.wanted(TaskId("t-3"), TaskState.COMPLETED)
    assert not feed.wanted(one, TaskState.RUNNING)
