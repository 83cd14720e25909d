"""ADR 0030: what the dashboard's task list asks of every store: filters by workflow,
id prefix and creation time, keyset pages under them, and counts by state per owner."""

from datetime import timedelta

import pytest

from taskloom.engine.errors import InvalidCursorError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskFailure
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock


async def _tasks(
    manager: TaskManager, clock: FakeClock, names: list[str], owner: str
) -> list[Task]:
    created = []
    for name in names:
        created.append(await manager.create(name, owner=owner))
        clock.advance(60)
    return created


async def _all_pages(manager: TaskManager, **filters: object) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = await manager.list(limit=2, cursor=cursor, **filters)  # type: ignore[arg-type]
        ids += [task.id for task in page.tasks]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


async def test_filter_by_workflow_pages_newest_first(
    manager: TaskManager, clock: FakeClock
) -> None:
    tasks = await _tasks(manager, clock, ["a", "b", "a", "c", "a", "b"], "ann")
    wanted = [task.id for task in reversed(tasks) if task.name in {"a", "c"}]
    assert await _all_pages(manager, names=["a", "c"], owner="ann") == wanted
    assert await _all_pages(manager, names=["zzz"]) == []


async def test_filter_by_creation_time_is_a_half_open_range(
    manager: TaskManager, clock: FakeClock
) -> None:
    tasks = await _tasks(manager, clock, ["a"] * 6, "ann")
    after, before = tasks[1].created_at, tasks[4].created_at
    expected = [task.id for task in reversed(tasks[1:4])]
    assert await _all_pages(manager, created_after=after, created_before=before) == expected
    assert await _all_pages(manager, created_after=tasks[5].created_at + timedelta(1)) == []
    early = tasks[0].created_at - timedelta(seconds=1)
    assert await _all_pages(manager, created_before=early) == []
    assert await _all_pages(manager, created_after=early) == [t.id for t in reversed(tasks)]


async def test_filter_by_id_prefix(manager: TaskManager, clock: FakeClock) -> None:
    tasks = await _tasks(manager, clock, ["a"] * 5, "ann")
    target = tasks[2]
    found = await manager.list(id_prefix=target.id[:12])
    assert [task.id for task in found.tasks] == [target.id]
    assert (await manager.list(id_prefix=target.id)).tasks == (target,)
    assert (await manager.list(id_prefix="\u00e9not-an-id")).tasks == ()


async def test_filters_add_up_with_owner_and_state(manager: TaskManager, clock: FakeClock) -> None:
    mine = await _tasks(manager, clock, ["a", "b", "a"], "ann")
    theirs = await _tasks(manager, clock, ["a"], "bob")
    cancelled = await manager.cancel(mine[0].id)
    page = await manager.list(owner="ann", names=["a"], states=[TaskState.QUEUED])
    assert [task.id for task in page.tasks] == [mine[2].id]
    page = await manager.list(owner="ann", names=["a"], states=[TaskState.CANCELLED])
    assert [task.id for task in page.tasks] == [cancelled.id]
    assert theirs[0].id not in [task.id for task in (await manager.list(owner="ann")).tasks]


async def test_counts_by_state_per_owner(manager: TaskManager, clock: FakeClock) -> None:
    mine = await _tasks(manager, clock, ["a"] * 4, "ann")
    await _tasks(manager, clock, ["a"] * 2, "bob")
    await manager.cancel(mine[0].id)
    started = await manager.start(mine[1].id)
    await manager.fail(started.id, TaskFailure(code="node_failed", message="boom"))
    local = await manager.create("a", owner=None)
    assert await manager.count_by_state(owner="ann") == {
        TaskState.QUEUED: 2,
        TaskState.CANCELLED: 1,
        TaskState.FAILED: 1,
    }
    assert await manager.count_by_state(owner="bob") == {TaskState.QUEUED: 2}
    assert await manager.count_by_state(owner=None) == {local.state: 1}
    assert await manager.count_by_state(owner="nobody") == {}
    everything = await manager.count_by_state()
    assert sum(everything.values()) == 7


async def test_counts_stop_at_a_cap(manager: TaskManager, clock: FakeClock) -> None:
    tasks = await _tasks(manager, clock, ["a"] * 5, "ann")
    await manager.cancel(tasks[0].id)
    assert await manager.count_by_state(owner="ann", at_most=3) == {
        TaskState.QUEUED: 3,
        TaskState.CANCELLED: 1,
    }
    assert await manager.count_by_state(at_most=10) == {
        TaskState.QUEUED: 4,
        TaskState.CANCELLED: 1,
    }
    assert await manager.count_by_state(owner=None, at_most=3) == {}


async def test_a_filtered_cursor_is_still_checked(manager: TaskManager) -> None:
    with pytest.raises(InvalidCursorError):
        await manager.list(names=["a"], cursor="not-a-cursor")
