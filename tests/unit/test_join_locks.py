"""Locks by join key (ADR 0040): one key's holder holds back only that key, and a key
nobody holds or waits for is forgotten, whether its waiters got it or gave up."""

import anyio

from taskloom.server.join_locks import JoinLocks


async def test_a_key_holds_back_only_itself_and_is_forgotten_when_unused() -> None:
    locks = JoinLocks()
    order: list[str] = []
    giving_up = anyio.CancelScope()

    async def same() -> None:
        async with locks.hold("a"):
            order.append("same")

    async def gives_up() -> None:
        with giving_up:
            async with locks.hold("a"):
                order.append("never")

    async with anyio.create_task_group() as group, locks.hold("a"):
        group.start_soon(same)
        group.start_soon(gives_up)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            async with locks.hold("b"):  # another key: at once
                order.append("other")
        giving_up.cancel()
        await anyio.wait_all_tasks_blocked()
        assert len(locks) == 1
        order.append("held")
    assert order == ["other", "held", "same"]
    assert len(locks) == 0
