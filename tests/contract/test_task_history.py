"""ADR 0036: every store keeps each task's history of state and status changes, written
with the task, bounded, read with the owner check, and deleted with the task."""

from datetime import timedelta

import pytest

from taskloom.engine.errors import IllegalTransitionError, TaskNotFoundError
from taskloom.engine.history import MAX_STATUS_ROWS, Cause
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Task, TaskFailure
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock

QUESTION = InputRequest(message="how many?", requested_schema={"type": "integer"})


async def _rows(manager: TaskManager, task: Task) -> list[tuple[TaskState, str | None, Cause]]:
    _, entries = await manager.history(task.id)
    return [(entry.state, entry.status_message, entry.cause) for entry in entries]


async def test_a_question_answered_then_completed(manager: TaskManager) -> None:
    task = await manager.create("job")
    await manager.start(task.id, status_message="working")
    await manager.require_input(task.id, "n", QUESTION)
    await manager.provide_input(task.id, "n", 3)
    done = await manager.complete(task.id, {"ok": True}, status_message="done")
    found, entries = await manager.history(task.id)
    assert found == done
    assert [(entry.state, entry.status_message, entry.cause) for entry in entries] == [
        (TaskState.QUEUED, None, Cause.CREATED),
        (TaskState.RUNNING, "working", Cause.CLAIMED),
        (TaskState.INPUT_REQUIRED, "how many?", Cause.QUESTION),
        (TaskState.RUNNING, "input received", Cause.ANSWER),
        (TaskState.COMPLETED, "done", Cause.COMPLETED),
    ]
    versions = [entry.version for entry in entries]
    assert versions == sorted(versions)
    assert versions[-1] == done.version
    assert entries[-1].at == done.updated_at
    assert all(entry.task_id == task.id for entry in entries)


async def test_failure_and_cancel_say_what_ended_the_task(manager: TaskManager) -> None:
    failing = await manager.start((await manager.create("job")).id)
    await manager.fail(failing.id, TaskFailure(code="node_failed", message="boom"))
    cancelled = await manager.create("job")
    await manager.cancel(cancelled.id, reason="not needed")
    assert (await _rows(manager, failing))[-1] == (TaskState.FAILED, "boom", Cause.FAILED)
    assert await _rows(manager, cancelled) == [
        (TaskState.QUEUED, None, Cause.CREATED),
        (TaskState.CANCELLED, "not needed", Cause.CANCELLED),
    ]


async def test_writes_that_change_neither_state_nor_text_add_no_row(
    manager: TaskManager,
) -> None:
    task = await manager.start((await manager.create("job")).id, status_message="step")
    for done in range(5):
        await manager.report_progress(task.id, completed=done, total=10)  # numbers only
    assert len(await _rows(manager, task)) == 2


async def test_status_text_rows_are_capped_state_changes_never(manager: TaskManager) -> None:
    task = await manager.start((await manager.create("job")).id)
    for tick in range(MAX_STATUS_ROWS + 20):
        await manager.report_progress(task.id, completed=tick, message=f"tick {tick}")
    await manager.complete(task.id, {"ok": True}, status_message="finished")
    found, entries = await manager.history(task.id)
    texts = [entry for entry in entries if not entry.state_changed]
    assert len(texts) == MAX_STATUS_ROWS
    assert texts[-1].status_message == f"tick {MAX_STATUS_ROWS - 1}"
    assert all(entry.cause is Cause.PROGRESS for entry in texts)
    assert [entry.state for entry in entries if entry.state_changed] == [
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.COMPLETED,
    ]
    assert entries[-1].status_message == found.status_message == "finished"


async def test_a_claim_by_a_worker_is_recorded(manager: TaskManager) -> None:
    task = await manager.create("job")
    (claimed,) = await manager.claim(
        worker="w1", workflows=frozenset({"job"}), lease_for=timedelta(seconds=30), limit=1
    )
    assert claimed.task.state is TaskState.RUNNING
    assert [row[0] for row in await _rows(manager, task)] == [
        TaskState.QUEUED,
        TaskState.RUNNING,
    ]


async def test_a_refused_write_adds_no_row(store: TaskStore, manager: TaskManager) -> None:
    task = await manager.cancel((await manager.create("job")).id)
    with pytest.raises(IllegalTransitionError):
        await manager.start(task.id)
    assert [row[0] for row in await _rows(manager, task)] == [
        TaskState.QUEUED,
        TaskState.CANCELLED,
    ]


async def test_another_owner_sees_no_history(manager: TaskManager) -> None:
    task = await manager.create("job", owner="alice")
    assert (await manager.history(task.id, owner="alice"))[0].id == task.id
    with pytest.raises(TaskNotFoundError):
        await manager.history(task.id, owner="bob")
    with pytest.raises(TaskNotFoundError):
        await manager.history("no-such-task")


async def test_history_goes_with_its_task(
    store: TaskStore, manager: TaskManager, clock: FakeClock
) -> None:
    expiring = await manager.create("job", ttl_ms=1_000)
    finished = await manager.cancel((await manager.create("job")).id)
    clock.advance(2)
    assert await store.history(expiring.id, clock.now()) is None  # expired: invisible
    assert await manager.purge_expired() == 1
    assert await store.delete_finished(limit=10, task_ids=[finished.id]) == 1
    assert await store.history(finished.id, clock.now()) is None
    # a new task reusing nothing of theirs starts with a history of its own
    fresh = await manager.create("job")
    assert len((await manager.history(fresh.id))[1]) == 1
    assert clock.now() - fresh.created_at < timedelta(seconds=1)
