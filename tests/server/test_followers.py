"""TaskFollowers: one change-feed subscription per connection, nothing before the response,
no change missed between a task's commit and its being followed."""

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Self, cast

import anyio
import mcp_types as types
import pytest
from anyio.abc import TaskGroup
from mcp.server.session import ServerSession
from mcp.shared.message import SessionMessage

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server.push import Outbox, TaskFollowers
from taskloom.testing import InMemoryTaskStore

WITHIN_S = 10.0


class FakeSession:
    """Records the notifications a follower sends."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._waiters: list[anyio.Event] = []

    async def send_notification(self, notification: Any, **_: Any) -> None:
        self.sent.append(notification.params.model_dump(by_alias=True, mode="json"))
        for waiter in self._waiters:
            waiter.set()
        self._waiters.clear()

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait (bounded) until *predicate* holds; re-checked on every notification,
        then once every task is blocked (the follower has finished its step)."""
        with anyio.fail_after(WITHIN_S):
            while not predicate():
                waiter = anyio.Event()
                self._waiters.append(waiter)
                await waiter.wait()
        await anyio.wait_all_tasks_blocked()

    def statuses(self, task_id: str) -> list[str]:
        return [n["status"] for n in self.sent if n.get("taskId") == task_id]


class Connection:
    """A connection's followers, its outbox, and where its messages go."""

    def __init__(self, manager: TaskManager, task_group: TaskGroup) -> None:
        self.send, self.written = anyio.create_memory_object_stream[SessionMessage](100)
        self.outbox = Outbox(self.send)
        self.followers = TaskFollowers(manager, self.outbox, task_group)
        self.session = FakeSession()
        self._manager = manager
        self._next_id = 0

    async def create(self, *, end_first: bool = False) -> tuple[Task, int]:
        """A task created by a request not answered yet (*end_first*: cancelled before
        the follower registers it); the task and the request id."""
        self._next_id += 1
        request_id = self._next_id

        async def create() -> Task:
            task = await self._manager.create("gated", {"gate": "g"})
            if end_first:
                await self._manager.cancel(task.id, reason="gone at once")
            return task

        session = cast(ServerSession, self.session)
        task = await self.followers.create_and_follow(
            create, session=session, request_id=request_id, progress_token=None
        )
        return task, request_id

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.send.close()
        self.written.close()

    async def answer(self, request_id: int) -> None:
        response = types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={})
        await self.outbox.send(SessionMessage(message=response))


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[TaskManager]:
    """A task manager with no worker: tasks change only when a test changes them."""
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "tasks.db"),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
        run_worker=False,
    )
    async with open_engine(settings) as engine:
        yield engine.manager


async def test_a_task_ended_before_it_was_followed_still_reports_its_end(
    manager: TaskManager,
) -> None:
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        task, request_id = await connection.create(end_first=True)
        assert task.state.value == "queued"  # what the create answered
        await anyio.wait_all_tasks_blocked()
        assert connection.session.sent == []  # nothing before the response
        await connection.answer(request_id)
        await connection.session.until(lambda: connection.session.statuses(task.id) != [])
        assert connection.session.statuses(task.id) == ["cancelled"]
        assert connection.followers.following == 0
        task_group.cancel_scope.cancel()


async def test_one_subscription_serves_every_task_of_a_connection(
    manager: TaskManager,
) -> None:
    before = manager.feed.subscriber_count
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        session = connection.session
        created = [await connection.create() for _ in range(20)]
        assert connection.followers.following == 20
        assert manager.feed.subscriber_count == before + 1
        for task, request_id in created:
            await connection.answer(request_id)
            await manager.cancel(task.id, reason="done")
        await session.until(lambda: len(session.sent) == 20)
        assert all(session.statuses(task.id) == ["cancelled"] for task, _ in created)
        assert connection.followers.following == 0
        assert manager.feed.subscriber_count == before  # closed when none is followed
        task, request_id = await connection.create()  # and opened again
        assert manager.feed.subscriber_count == before + 1
        await connection.answer(request_id)
        await manager.cancel(task.id, reason="done")
        await session.until(lambda: session.statuses(task.id) != [])
        assert session.statuses(task.id) == ["cancelled"]
        task_group.cancel_scope.cancel()


async def test_a_held_change_waits_for_the_response_of_its_own_request(
    manager: TaskManager,
) -> None:
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        session = connection.session
        first, first_request = await connection.create()
        second, second_request = await connection.create()
        await manager.cancel(first.id, reason="done")
        await manager.cancel(second.id, reason="done")
        await connection.answer(second_request)
        await session.until(lambda: session.statuses(second.id) != [])
        assert session.statuses(second.id) == ["cancelled"]
        assert session.statuses(first.id) == []  # its response is not out yet
        await connection.answer(first_request)
        await session.until(lambda: session.statuses(first.id) != [])
        assert session.statuses(first.id) == ["cancelled"]
        task_group.cancel_scope.cancel()


async def test_connections_are_told_only_of_their_own_tasks(manager: TaskManager) -> None:
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as alice,
        Connection(manager, task_group) as bob,
    ):
        task, request_id = await alice.create()
        _, other_request = await bob.create()
        await alice.answer(request_id)
        await bob.answer(other_request)
        await manager.cancel(task.id, reason="done")
        await alice.session.until(lambda: alice.session.statuses(task.id) != [])
        assert alice.session.statuses(task.id) == ["cancelled"]
        assert bob.session.sent == []
        assert bob.followers.following == 1
        task_group.cancel_scope.cancel()


async def test_a_change_during_creates_in_flight_reaches_the_task_created_last(
    manager: TaskManager,
) -> None:
    """The first create returns after the second task has changed, before the second
    create returns: the change kept for it is not dropped with the first's."""
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        session = cast(ServerSession, connection.session)
        second_changed, first_may_return = anyio.Event(), anyio.Event()
        second_may_return = anyio.Event()
        created: dict[str, Task] = {}

        async def first() -> Task:
            task = await manager.create("gated", {"gate": "g"})
            await first_may_return.wait()
            return task

        async def second() -> Task:
            task = await manager.create("gated", {"gate": "g"})
            await manager.cancel(task.id, reason="gone at once")
            await anyio.wait_all_tasks_blocked()  # the follower has received the change
            second_changed.set()
            await second_may_return.wait()
            return task

        async def call(name: str, create: Callable[[], Any], request_id: int) -> None:
            created[name] = await connection.followers.create_and_follow(
                create, session=session, request_id=request_id, progress_token=None
            )

        with anyio.fail_after(WITHIN_S):
            task_group.start_soon(call, "first", first, 1)
            task_group.start_soon(call, "second", second, 2)
            await second_changed.wait()
            assert connection.followers.kept >= 1
            first_may_return.set()
            while "first" not in created:
                await anyio.wait_all_tasks_blocked()
            second_may_return.set()
            while "second" not in created:
                await anyio.wait_all_tasks_blocked()
        assert connection.followers.kept == 0  # nothing kept once no create is in flight
        await connection.answer(2)
        task = created["second"]
        await connection.session.until(lambda: connection.session.statuses(task.id) != [])
        assert connection.session.statuses(task.id) == ["cancelled"]
        task_group.cancel_scope.cancel()


async def test_a_create_that_fails_leaves_no_subscription(manager: TaskManager) -> None:
    before = manager.feed.subscriber_count
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):

        async def failing() -> Task:
            await manager.create("gated", {"gate": "g"})  # a change the feed delivers
            await anyio.wait_all_tasks_blocked()
            raise RuntimeError("refused")

        session = cast(ServerSession, connection.session)
        with pytest.raises(RuntimeError, match="refused"):
            await connection.followers.create_and_follow(
                failing, session=session, request_id=1, progress_token=None
            )
        await anyio.wait_all_tasks_blocked()
        assert manager.feed.subscriber_count == before
        assert connection.followers.kept == 0
        assert connection.followers.following == 0
        task, request_id = await connection.create()  # a later create is followed
        await connection.answer(request_id)
        await manager.cancel(task.id, reason="done")
        await connection.session.until(lambda: connection.session.statuses(task.id) != [])
        assert connection.session.statuses(task.id) == ["cancelled"]
        task_group.cancel_scope.cancel()


def _create_and_retry_that_ends_it(
    manager: TaskManager,
) -> tuple[Callable[[], Awaitable[Task]], Callable[[], Awaitable[Task]]]:
    """A create with an idempotency key, and its retry: the retry reads the task, then
    the task ends (cancelled, the follower has received it) before the retry returns
    the version it read, from before the end."""

    async def first() -> Task:
        return await manager.create("gated", {"gate": "g"}, idempotency_key="k")

    async def retry() -> Task:
        held = await manager.create("gated", {"gate": "g"}, idempotency_key="k")
        await manager.cancel(held.id, reason="ended while the retry returns")
        await anyio.wait_all_tasks_blocked()  # the follower has received the end
        return held

    return first, retry


async def test_a_retry_that_read_its_task_before_it_ended_still_ends_following(
    manager: TaskManager,
) -> None:
    """A create with a held idempotency key returns the task it read; when that task,
    followed already, ends between the read and the return, the follower reports it
    and then drops the task, and the subscription closes (the retry's stale version
    is not left followed forever)."""
    before = manager.feed.subscriber_count
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        session = cast(ServerSession, connection.session)
        first, retry = _create_and_retry_that_ends_it(manager)

        with anyio.fail_after(WITHIN_S):
            task = await connection.followers.create_and_follow(
                first, session=session, request_id=1, progress_token=None
            )
            await connection.answer(1)
            again = await connection.followers.create_and_follow(
                retry, session=session, request_id=2, progress_token=None
            )
            assert (again.id, again.state.value) == (task.id, "queued")
            await connection.answer(2)
            await anyio.wait_all_tasks_blocked()
        assert "cancelled" in connection.session.statuses(task.id)
        assert connection.followers.following == 0
        assert manager.feed.subscriber_count == before  # closed: nothing is followed
        task_group.cancel_scope.cancel()


async def test_a_retry_before_the_first_response_is_out_does_not_lose_the_end(
    manager: TaskManager,
) -> None:
    """The first create's response is not out yet when a retry with the same key
    returns the task as it read it, before the task ended: the end is still reported."""
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        session = cast(ServerSession, connection.session)
        first, retry = _create_and_retry_that_ends_it(manager)

        with anyio.fail_after(WITHIN_S):
            task = await connection.followers.create_and_follow(
                first, session=session, request_id=1, progress_token=None
            )
            await connection.followers.create_and_follow(
                retry, session=session, request_id=2, progress_token=None
            )
            await connection.answer(1)
            await connection.answer(2)
            await connection.session.until(
                lambda: "cancelled" in connection.session.statuses(task.id)
            )
        assert connection.followers.following == 0
        task_group.cancel_scope.cancel()


async def test_another_process_s_change_is_read_only_for_a_followed_task() -> None:
    """On PostgreSQL every change of every process is announced; a connection needs a
    read only of those of the tasks it follows (or any, while a create is in flight).
    (A manager of its own: the engine's other subscriptions would want them all.)"""
    manager = TaskManager(InMemoryTaskStore())
    other = await manager.create("gated", {"gate": "g"})  # not this connection's
    reads: list[str] = []
    read = manager.get

    async def counted(task_id: str, **kwargs: Any) -> Task:
        reads.append(task_id)
        return await read(task_id, **kwargs)

    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):
        mine, request_id = await connection.create()
        await connection.answer(request_id)
        manager.get = counted  # type: ignore[method-assign]
        await manager.notice(other.id, "cancelled")
        assert reads == []
        await manager.notice(mine.id, "cancelled")
        assert reads == [mine.id]
        task_group.cancel_scope.cancel()


async def test_another_process_s_change_is_read_while_a_create_is_in_flight() -> None:
    """A change announced before the create returns (another worker's claim of the new
    task, a change to the task an idempotency key returns) is read: it may be the
    created task's, not followed yet."""
    manager = TaskManager(InMemoryTaskStore())
    reads: list[str] = []
    read = manager.get

    async def counted(task_id: str, **kwargs: Any) -> Task:
        reads.append(task_id)
        return await read(task_id, **kwargs)

    manager.get = counted  # type: ignore[method-assign]
    async with (
        anyio.create_task_group() as task_group,
        Connection(manager, task_group) as connection,
    ):

        async def create_announced_elsewhere() -> Task:
            task = await manager.create("gated", {"gate": "g"})
            await manager.notice(task.id, "running")  # announced before the create returns
            return task

        session = cast(ServerSession, connection.session)
        task = await connection.followers.create_and_follow(
            create_announced_elsewhere, session=session, request_id=1, progress_token=None
        )
        assert reads == [task.id]
        task_group.cancel_scope.cancel()
