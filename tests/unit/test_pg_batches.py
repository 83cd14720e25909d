"""The PostgreSQL store's batches of node writes (ADR 0052), with a send of our own: what
waits together goes together, each caller gets its own answer, a statement's own error
is retried write by write, a cancel withdraws a write not sent and waits for one sent."""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial

import anyio
import pytest

from taskloom.engine.errors import (
    LeaseLostError,
    OutcomeUnknownError,
    PersistenceError,
    StoreClosedError,
)
from taskloom.persistence.postgres.batches import Batches, Outcome
from tests.helpers import all_at_once


class _Send:
    """Records each batch's payloads; *hold* keeps a batch in flight until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.hold: anyio.Event | None = None
        self.in_flight = anyio.Event()
        self.fail_with: Exception | None = None

    async def __call__(self, payloads: Sequence[str]) -> list[Outcome]:
        self.batches.append(list(payloads))
        self.in_flight.set()
        if self.hold is not None:
            with anyio.fail_after(10):  # the sender shields the send: bound it here
                await self.hold.wait()
        if self.fail_with is not None and (len(payloads) > 1 or "bad" in payloads):
            raise self.fail_with
        return [
            (False, LeaseLostError(p)) if p.startswith("lost") else (True, p.upper())
            for p in payloads
        ]


@asynccontextmanager
async def _batches(send: _Send) -> AsyncIterator[Batches[str]]:
    batches = Batches[str](send, key=lambda payload: payload.rstrip("'"))
    async with anyio.create_task_group() as group:
        await group.start(batches.run)
        yield batches
        batches.close()


async def _all(batches: Batches[str], payloads: list[str]) -> list[object]:
    return list(
        await all_at_once([partial(batches.submit, each) for each in payloads], within_s=10)
    )


async def test_writes_waiting_together_go_as_one_batch_each_answered_alone() -> None:
    send = _Send()
    async with _batches(send) as batches:
        found = await _all(batches, ["a", "lost-b", "c"])
    assert send.batches == [["a", "lost-b", "c"]]
    assert [found[0], found[2]] == ["A", "C"]
    assert isinstance(found[1], LeaseLostError)


async def test_two_writes_of_one_key_are_never_in_one_batch() -> None:
    send = _Send()
    async with _batches(send) as batches:
        found = await _all(batches, ["a", "a'", "b"])
    assert send.batches == [["a", "b"], ["a'"]]
    assert found == ["A", "A'", "B"]


async def test_writes_gather_while_a_batch_is_in_flight() -> None:
    send = _Send()
    send.hold = anyio.Event()
    async with _batches(send) as batches, anyio.create_task_group() as group:
        group.start_soon(batches.submit, "a")
        with anyio.fail_after(10):
            await send.in_flight.wait()
        for payload in ("b", "c"):
            group.start_soon(batches.submit, payload)
        await anyio.wait_all_tasks_blocked()
        send.hold.set()
    assert send.batches == [["a"], ["b", "c"]]


async def test_a_statements_own_error_is_retried_write_by_write() -> None:
    send = _Send()
    send.fail_with = PersistenceError("a constraint one row broke")
    async with _batches(send) as batches:
        found = await _all(batches, ["a", "bad", "c"])
    assert send.batches == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
    assert found == ["A", send.fail_with, "C"]


async def test_an_unknown_outcome_is_every_callers_and_not_sent_again() -> None:
    send = _Send()
    send.fail_with = OutcomeUnknownError("the connection failed during a write")
    async with _batches(send) as batches:
        found = await _all(batches, ["a", "b"])
    assert send.batches == [["a", "b"]]
    assert found == [send.fail_with, send.fail_with]


async def test_a_cancel_before_the_batch_leaves_withdraws_the_write() -> None:
    send = _Send()
    send.hold = anyio.Event()
    async with _batches(send) as batches, anyio.create_task_group() as group:
        group.start_soon(batches.submit, "a")
        with anyio.fail_after(10):
            await send.in_flight.wait()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await batches.submit("b")  # waits behind "a"'s batch: withdrawn
        group.start_soon(batches.submit, "c")
        await anyio.wait_all_tasks_blocked()
        send.hold.set()
    assert send.batches == [["a"], ["c"]]


async def test_a_cancel_once_the_batch_left_waits_for_its_outcome() -> None:
    send = _Send()
    send.hold = anyio.Event()
    returned: list[bool] = []

    async def submit_then_cancelled(scope: anyio.CancelScope) -> None:
        with scope:
            await batches.submit("a")
        returned.append(send.hold is not None and send.hold.is_set())

    async with _batches(send) as batches, anyio.create_task_group() as group:
        scope = anyio.CancelScope()
        group.start_soon(submit_then_cancelled, scope)
        with anyio.fail_after(10):
            await send.in_flight.wait()
        scope.cancel()
        await anyio.wait_all_tasks_blocked()
        assert returned == []  # still waiting for the statement it is in
        send.hold.set()
    assert returned == [True]
    assert send.batches == [["a"]]


async def test_a_write_once_the_store_closed_is_refused() -> None:
    send = _Send()
    batches = Batches[str](send, key=str)
    async with anyio.create_task_group() as group:
        await group.start(batches.run)
        batches.close()
    with pytest.raises(StoreClosedError):
        await batches.submit("a")
    assert send.batches == []


async def test_a_cancel_around_the_sender_leaves_it_sending_until_closed() -> None:
    """Everything around the store is cancelled (a SIGTERM): a write its cancelled user
    makes in a shielded scope (a node's end) is still sent and answered."""
    send = _Send()
    batches = Batches[str](send, key=str)
    found: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            await group.start(batches.run)
            group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                found.append(await batches.submit("a"))
                batches.close()
    assert found == ["A"]
    assert send.batches == [["a"]]
