"""One behavioural suite for the TaskManager over every store (memory and SQLite)."""

import itertools
from typing import Any

import anyio
import pytest

from taskloom.engine.errors import (
    IdempotencyConflictError,
    IllegalTransitionError,
    InputNotRequestedError,
    InvalidCursorError,
    InvalidRequestError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.manager import TaskManager, TaskManagerSettings
from taskloom.engine.models import InputRequest, Task, TaskFailure, TaskId
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock

QUESTION = InputRequest(
    message="Deploy?",
    requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
)


async def _running(manager: TaskManager, name: str = "job") -> Task:
    task = await manager.create(name)
    return await manager.start(task.id)


async def _all_pages(manager: TaskManager, limit: int, **filters: Any) -> list[Task]:
    tasks: list[Task] = []
    cursor: str | None = None
    while True:
        page = await manager.list(limit=limit, cursor=cursor, **filters)
        tasks.extend(page.tasks)
        if page.next_cursor is None:
            return tasks
        cursor = page.next_cursor


# -- create and get -----------------------------------------------------------------------


async def test_a_created_task_is_queued_and_readable(
    manager: TaskManager, clock: FakeClock
) -> None:
    task = await manager.create("audit", {"path": ".", "depth": 2}, owner="alice")
    assert task.state is TaskState.QUEUED
    assert task.version == 1
    assert task.created_at == task.updated_at == clock.now()
    assert len(task.id) >= 22  # at least 128 random bits, URL-safe
    assert await manager.get(task.id) == task
    assert await manager.get(task.id, owner="alice") == task


async def test_task_ids_are_unique(manager: TaskManager) -> None:
    ids = {(await manager.create("job")).id for _ in range(200)}
    assert len(ids) == 200


async def test_an_unknown_id_is_not_found(manager: TaskManager) -> None:
    with pytest.raises(TaskNotFoundError, match="task not found: nope"):
        await manager.get("nope")


async def test_another_owners_task_reads_as_not_found(manager: TaskManager) -> None:
    task = await manager.create("job", owner="alice")
    with pytest.raises(TaskNotFoundError):
        await manager.get(task.id, owner="bob")
    with pytest.raises(TaskNotFoundError):
        await manager.get(task.id, owner=None)
    with pytest.raises(TaskNotFoundError):
        await manager.cancel(task.id, owner="bob")
    assert (await manager.get(task.id)).state is TaskState.QUEUED


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(2**53), 1.5, "ünïcødé ✓", [1, [2, [3]]], {"a": {"b": [None, "x"]}}],
)
async def test_results_round_trip_as_json(manager: TaskManager, value: Any) -> None:
    task = await _running(manager)
    await manager.complete(task.id, value)
    assert (await manager.get(task.id)).result == value


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"name": "job", "arguments": {"f": object()}}, "JSON"),
        ({"name": "job", "ttl_ms": 0}, "ttl"),
        ({"name": "job", "ttl_ms": -5}, "ttl"),
        ({"name": "job", "idempotency_key": ""}, "idempotency_key"),
        ({"name": "job", "owner": ""}, "owner"),
        ({"name": "job", "poll_interval_ms": -1}, "poll_interval_ms"),
    ],
)
async def test_bad_create_arguments_are_rejected_and_nothing_is_stored(
    manager: TaskManager, call: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        await manager.create(**call)
    assert (await manager.list()).tasks == ()


async def test_a_read_is_a_checkpoint_so_a_poll_loop_lets_others_run_and_can_time_out(
    manager: TaskManager,
) -> None:
    """anyio's rule for async APIs: each await of a read yields to the loop and honours
    cancellation. A read that returned without yielding (SQLite's point reads, on the
    loop's own thread) made an in-process poll loop starve the run it waited for, and a
    timeout around it never fire. (The loops are bounded by counts: a read that never
    yields would never let a timeout fire.)"""
    task = await manager.create("job")
    reads = 0
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(manager.start, task.id)
        while (await manager.get(task.id)).state is not TaskState.RUNNING:
            reads += 1
            assert reads < 10_000, "the poll loop starved the start it waits for"
    reads = 0
    with anyio.move_on_after(0) as scope:
        while reads < 10_000:
            await manager.get(task.id)
            reads += 1
    assert scope.cancelled_caught, "a timeout around the reads never reached them"
    assert reads == 0


# -- idempotency ------------------------------------------------------------------------------


async def test_the_same_key_and_arguments_return_the_first_task(manager: TaskManager) -> None:
    first = await manager.create("job", {"n": 1}, owner="alice", idempotency_key="k1")
    again = await manager.create("job", {"n": 1}, owner="alice", idempotency_key="k1")
    assert again == first
    assert len((await manager.list()).tasks) == 1


async def test_the_same_key_with_other_arguments_is_a_conflict(manager: TaskManager) -> None:
    first = await manager.create("job", {"n": 1}, idempotency_key="k1")
    with pytest.raises(IdempotencyConflictError, match=first.id):
        await manager.create("job", {"n": 2}, idempotency_key="k1")
    with pytest.raises(IdempotencyConflictError):
        await manager.create("other", {"n": 1}, idempotency_key="k1")
    assert [task.id for task in (await manager.list()).tasks] == [first.id]


async def test_keys_are_scoped_to_their_owner(manager: TaskManager) -> None:
    alice = await manager.create("job", owner="alice", idempotency_key="k")
    bob = await manager.create("job", owner="bob", idempotency_key="k")
    anonymous = await manager.create("job", idempotency_key="k")
    assert len({alice.id, bob.id, anonymous.id}) == 3


async def test_an_expired_task_frees_its_key(manager: TaskManager, clock: FakeClock) -> None:
    first = await manager.create("job", {"n": 1}, ttl_ms=1_000, idempotency_key="k")
    clock.advance(1.0)
    second = await manager.create("job", {"n": 2}, ttl_ms=1_000, idempotency_key="k")
    assert second.id != first.id
    assert (await manager.get(second.id)).arguments == {"n": 2}


async def test_concurrent_creates_with_one_key_make_one_task(manager: TaskManager) -> None:
    results: list[Task] = []

    async def create() -> None:
        results.append(await manager.create("job", {"n": 1}, idempotency_key="same"))

    async with anyio.create_task_group() as task_group:
        for _ in range(20):
            task_group.start_soon(create)
    assert len({task.id for task in results}) == 1


# -- listing ----------------------------------------------------------------------------------


async def test_list_is_newest_first_and_pages_cover_every_task_once(
    manager: TaskManager,
) -> None:
    created = [await manager.create("job", {"i": i}) for i in range(23)]
    listed = await _all_pages(manager, limit=5)
    assert [task.id for task in listed] == [task.id for task in reversed(created)]


async def test_paging_is_stable_under_concurrent_inserts(manager: TaskManager) -> None:
    before = [await manager.create("job", {"i": i}) for i in range(10)]
    first_page = await manager.list(limit=4)
    for i in range(5):
        await manager.create("late", {"i": i})
    rest: list[Task] = []
    cursor = first_page.next_cursor
    while cursor is not None:
        page = await manager.list(limit=4, cursor=cursor)
        rest.extend(page.tasks)
        cursor = page.next_cursor
    seen = [task.id for task in first_page.tasks + tuple(rest)]
    assert seen == [task.id for task in reversed(before)]


async def test_list_filters_by_owner_and_state(manager: TaskManager) -> None:
    alice = [await manager.create("job", owner="alice") for _ in range(3)]
    bob = await manager.create("job", owner="bob")
    anonymous = await manager.create("job")
    await manager.start(alice[0].id)
    assert {t.id for t in await _all_pages(manager, 2, owner="alice")} == {t.id for t in alice}
    assert [t.id for t in await _all_pages(manager, 2, owner="bob")] == [bob.id]
    assert [t.id for t in await _all_pages(manager, 2, owner=None)] == [anonymous.id]
    running = await _all_pages(manager, 2, states=[TaskState.RUNNING])
    assert [t.id for t in running] == [alice[0].id]
    queued_alice = await _all_pages(manager, 1, owner="alice", states=[TaskState.QUEUED])
    assert [t.id for t in queued_alice] == [alice[2].id, alice[1].id]


async def test_count_matches_owner_and_states_and_skips_expired_tasks(
    manager: TaskManager, clock: FakeClock
) -> None:
    alice = [await manager.create("job", owner="alice") for _ in range(3)]
    await manager.create("job", owner="alice", ttl_ms=1_000)
    await manager.create("job", owner="bob")
    await manager.create("job")
    await manager.start(alice[0].id)
    await manager.cancel(alice[1].id, owner="alice", reason="test")
    clock.advance(2.0)  # the task with a TTL expires
    unfinished = [TaskState.QUEUED, TaskState.RUNNING, TaskState.INPUT_REQUIRED]
    assert await manager.count(owner="alice", states=unfinished) == 2
    assert await manager.count(owner="alice", states=[TaskState.QUEUED]) == 1
    assert await manager.count(owner="bob", states=unfinished) == 1
    assert await manager.count(owner=None, states=unfinished) == 1
    assert await manager.count(states=unfinished) == 4
    assert await manager.count(owner="carol", states=unfinished) == 0


async def test_an_empty_list_has_no_cursor(manager: TaskManager) -> None:
    page = await manager.list()
    assert page.tasks == ()
    assert page.next_cursor is None


async def test_a_full_last_page_has_no_cursor(manager: TaskManager) -> None:
    for _ in range(4):
        await manager.create("job")
    page = await manager.list(limit=4)
    assert len(page.tasks) == 4
    assert page.next_cursor is None


@pytest.mark.parametrize("cursor", ["garbage", "", "dGwxOi0x", "x" * 500])
async def test_a_bad_cursor_is_rejected(manager: TaskManager, cursor: str) -> None:
    with pytest.raises(InvalidCursorError):
        await manager.list(cursor=cursor)


@pytest.mark.parametrize("limit", [0, -1, 1001])
async def test_a_bad_page_size_is_rejected(manager: TaskManager, limit: int) -> None:
    with pytest.raises(InvalidRequestError, match="limit"):
        await manager.list(limit=limit)


# -- transitions --------------------------------------------------------------------------------


async def test_a_task_runs_reports_progress_and_completes(manager: TaskManager) -> None:
    task = await _running(manager)
    progressed = await manager.report_progress(
        task.id, completed=2, total=5, message="phase 1/3 list"
    )
    assert progressed.progress is not None
    assert (progressed.progress.completed, progressed.progress.total) == (2, 5)
    assert progressed.status_message == "phase 1/3 list"
    done = await manager.complete(task.id, {"files": 3})
    assert done.state is TaskState.COMPLETED
    assert done.status_message == "phase 1/3 list"
    assert done.version == 4
    assert await manager.get(task.id) == done


async def test_every_write_advances_version_and_updated_at_strictly(
    manager: TaskManager,
) -> None:
    task = await manager.create("job")  # the fake clock never moves in this test
    versions = [task]
    versions.append(await manager.start(task.id))
    versions += [await manager.report_progress(task.id, completed=step) for step in range(3)]
    versions.append(await manager.complete(task.id))
    for older, newer in itertools.pairwise(versions):
        assert newer.version == older.version + 1
        assert newer.updated_at > older.updated_at
    assert (await manager.get(task.id)).updated_at == versions[-1].updated_at


async def test_reading_does_not_change_a_task(manager: TaskManager, clock: FakeClock) -> None:
    task = await manager.create("job")
    clock.advance(5)
    await manager.list()
    assert await manager.get(task.id) == task


async def test_failure_keeps_the_error(manager: TaskManager) -> None:
    task = await _running(manager)
    error = TaskFailure(
        code="node_failed",
        message="analyse: ValueError: bad file",
        error_type="ValueError",
        fingerprint="abc123",
        details={"node": "analyse", "attempts": 3},
    )
    failed = await manager.fail(task.id, error)
    assert failed.state is TaskState.FAILED
    assert failed.status_message == error.message
    assert (await manager.get(task.id)).error == error


@pytest.mark.parametrize("end", ["complete", "fail", "cancel"])
async def test_terminal_states_never_change(manager: TaskManager, end: str) -> None:
    task = await _running(manager)
    if end == "complete":
        await manager.complete(task.id, 1)
    elif end == "fail":
        await manager.fail(task.id, TaskFailure(code="x", message="x"))
    else:
        await manager.cancel(task.id)
    final = await manager.get(task.id)
    attempts = [
        manager.start(task.id),
        manager.requeue(task.id),
        manager.complete(task.id, 2),
        manager.fail(task.id, TaskFailure(code="y", message="y")),
        manager.cancel(task.id),
        manager.require_input(task.id, "k", QUESTION),
    ]
    for attempt in attempts:
        with pytest.raises(IllegalTransitionError):
            await attempt
    with pytest.raises(TaskStateError):
        await manager.report_progress(task.id, completed=1)
    assert await manager.get(task.id) == final


async def test_a_late_completion_after_cancel_does_not_land(manager: TaskManager) -> None:
    task = await _running(manager)
    cancelled = await manager.cancel(task.id, reason="user asked")
    assert cancelled.status_message == "user asked"
    with pytest.raises(IllegalTransitionError, match="from cancelled to completed"):
        await manager.complete(task.id, "late")
    assert (await manager.get(task.id)).result is None


async def test_a_queued_task_cannot_complete_or_ask(manager: TaskManager) -> None:
    task = await manager.create("job")
    with pytest.raises(IllegalTransitionError):
        await manager.complete(task.id)
    with pytest.raises(IllegalTransitionError):
        await manager.require_input(task.id, "k", QUESTION)
    with pytest.raises(TaskStateError, match="only running tasks report"):
        await manager.report_progress(task.id, completed=1)


async def test_a_running_task_can_be_requeued_and_started_again(manager: TaskManager) -> None:
    task = await _running(manager)
    queued = await manager.requeue(task.id, status_message="retry in 2s")
    assert queued.state is TaskState.QUEUED
    assert (await manager.start(task.id)).state is TaskState.RUNNING


async def test_updating_an_unknown_task_is_not_found(manager: TaskManager) -> None:
    with pytest.raises(TaskNotFoundError):
        await manager.start("missing")
    with pytest.raises(TaskNotFoundError):
        await manager.provide_input("missing", "k", 1)


@pytest.mark.parametrize(("completed", "total"), [(-1.0, None), (1.0, 0.0), (1.0, -3.0)])
async def test_bad_progress_is_rejected(
    manager: TaskManager, completed: float, total: float | None
) -> None:
    task = await _running(manager)
    with pytest.raises(InvalidRequestError):
        await manager.report_progress(task.id, completed=completed, total=total)
    assert (await manager.get(task.id)).progress is None


# -- input ----------------------------------------------------------------------------------------


async def test_an_input_round_trip(manager: TaskManager) -> None:
    task = await _running(manager)
    waiting = await manager.require_input(task.id, "deploy", QUESTION)
    assert waiting.state is TaskState.INPUT_REQUIRED
    assert waiting.input_requests == {"deploy": QUESTION}
    assert waiting.status_message == "Deploy?"
    answered = await manager.provide_input(task.id, "deploy", {"ok": True})
    assert answered.state is TaskState.RUNNING
    assert answered.input_requests == {}
    assert answered.input_responses == {"deploy": {"ok": True}}


async def test_a_task_waits_until_every_question_is_answered(manager: TaskManager) -> None:
    task = await _running(manager)
    await manager.require_input(task.id, "a", QUESTION)
    await manager.require_input(task.id, "b", QUESTION)
    after_a = await manager.provide_input(task.id, "a", 1)
    assert after_a.state is TaskState.INPUT_REQUIRED
    assert set(after_a.input_requests) == {"b"}
    after_b = await manager.provide_input(task.id, "b", 2)
    assert after_b.state is TaskState.RUNNING
    assert after_b.input_responses == {"a": 1, "b": 2}


async def test_racing_answers_to_different_questions_both_land(manager: TaskManager) -> None:
    task = await _running(manager)
    await manager.require_input(task.id, "a", QUESTION)
    await manager.require_input(task.id, "b", QUESTION)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(manager.provide_input, task.id, "a", "yes")
        task_group.start_soon(manager.provide_input, task.id, "b", "no")
    final = await manager.get(task.id)
    assert final.state is TaskState.RUNNING
    assert final.input_responses == {"a": "yes", "b": "no"}


async def test_an_answer_nobody_asked_for_is_rejected(manager: TaskManager) -> None:
    task = await _running(manager)
    await manager.require_input(task.id, "a", QUESTION)
    with pytest.raises(InputNotRequestedError, match="'b'"):
        await manager.provide_input(task.id, "b", 1)
    with pytest.raises(TaskNotFoundError):
        await manager.provide_input(task.id, "a", 1, owner="someone-else")
    assert (await manager.get(task.id)).input_requests == {"a": QUESTION}


async def test_cancel_while_waiting_for_input_drops_the_questions(manager: TaskManager) -> None:
    task = await _running(manager)
    await manager.require_input(task.id, "a", QUESTION)
    cancelled = await manager.cancel(task.id)
    assert cancelled.state is TaskState.CANCELLED
    assert cancelled.input_requests == {}
    with pytest.raises(InputNotRequestedError):
        await manager.provide_input(task.id, "a", 1)


# -- TTL --------------------------------------------------------------------------------------------


async def test_ttl_defaults_and_is_capped(store: TaskStore, clock: FakeClock) -> None:
    settings = TaskManagerSettings(default_ttl_ms=60_000, max_ttl_ms=120_000)
    manager = TaskManager(store, clock=clock, settings=settings)
    assert (await manager.create("job")).ttl_ms == 60_000
    assert (await manager.create("job", ttl_ms=5_000)).ttl_ms == 5_000
    assert (await manager.create("job", ttl_ms=10**9)).ttl_ms == 120_000
    assert (await manager.create("job", ttl_ms=None)).ttl_ms == 120_000


async def test_unlimited_ttl_when_there_is_no_cap(store: TaskStore, clock: FakeClock) -> None:
    manager = TaskManager(store, clock=clock, settings=TaskManagerSettings(max_ttl_ms=None))
    forever = await manager.create("job", ttl_ms=None)
    assert forever.ttl_ms is None
    assert forever.expires_at is None
    clock.advance(10 * 365 * 86_400)
    assert await manager.purge_expired() == 0
    assert await manager.get(forever.id) == forever


async def test_an_expired_task_vanishes_and_is_purged(
    manager: TaskManager, clock: FakeClock
) -> None:
    short = await manager.create("job", ttl_ms=1_000)
    long = await manager.create("job", ttl_ms=10_000)
    clock.advance(0.999)
    assert (await manager.get(short.id)).id == short.id
    clock.advance(0.001)
    with pytest.raises(TaskNotFoundError):
        await manager.get(short.id)
    with pytest.raises(TaskNotFoundError):
        await manager.cancel(short.id)
    assert [task.id for task in (await manager.list()).tasks] == [long.id]
    assert await manager.purge_expired() == 1
    assert await manager.purge_expired() == 0
    assert (await manager.get(long.id)).id == long.id


async def test_the_sweeper_purges_in_batches(store: TaskStore, clock: FakeClock) -> None:
    settings = TaskManagerSettings(sweep_batch_size=7)
    manager = TaskManager(store, clock=clock, settings=settings)
    for _ in range(30):
        await manager.create("job", ttl_ms=1_000)
    keep = await manager.create("job", ttl_ms=60_000)
    clock.advance(2)
    assert await manager.purge_expired() == 30
    assert [task.id for task in (await manager.list()).tasks] == [keep.id]


async def test_the_ttl_counts_from_creation_not_from_the_end(
    manager: TaskManager, clock: FakeClock
) -> None:
    task = await _running(manager)
    clock.advance(29 * 86_400)
    await manager.complete(task.id)
    clock.advance(86_400)  # 30 days after creation: the default retention
    with pytest.raises(TaskNotFoundError):
        await manager.get(task.id)


# -- the store port directly ------------------------------------------------------------------------


async def test_a_mutation_that_raises_writes_nothing(store: TaskStore, clock: FakeClock) -> None:
    manager = TaskManager(store, clock=clock)
    task = await manager.create("job")

    def refuse(current: Task) -> Task:
        raise InvalidRequestError("no")

    with pytest.raises(InvalidRequestError):
        await store.update(task.id, clock.now(), refuse)
    assert await store.get(task.id, clock.now()) == task


async def test_a_mutation_must_advance_the_version_by_one(
    store: TaskStore, clock: FakeClock
) -> None:
    manager = TaskManager(store, clock=clock)
    task = await manager.create("job")
    clock.advance(1)
    later = clock.now()

    def skip_version(current: Task) -> Task:
        return current.model_copy(update={"version": current.version + 2, "updated_at": later})

    def rename(current: Task) -> Task:
        return current.model_copy(
            update={"name": "other", "version": current.version + 1, "updated_at": later}
        )

    with pytest.raises(ValueError, match="version"):
        await store.update(task.id, later, skip_version)
    with pytest.raises(ValueError, match="name cannot change"):
        await store.update(task.id, later, rename)
    assert await store.get(task.id, later) == task


async def test_get_of_an_id_that_was_never_stored_is_none(
    store: TaskStore, clock: FakeClock
) -> None:
    assert await store.get(TaskId("x" * 24), clock.now()) is None
