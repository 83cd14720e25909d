"""Writes of one kind that wait at one moment, sent as one batch (ADR 0052).

A :class:`Batches` has one sender task (:meth:`Batches.run`) and one batch in flight at
a time: while it is in flight the next callers' writes gather, and they go together as
soon as it is back (group commit, as SQLite's writer does, ADR 0016). A lone write waits
for no one: its batch leaves on the next turn of the event loop. Two writes of one key
(the same node of one run) are never in one batch: the second waits for the next.

Each caller gets its own answer: the send returns one outcome per write, ``(True,
value)`` or ``(False, refusal)``. What the send raises is every caller's error, with one
exception: an error the database gave the statement itself (not an outage, not an
unknown outcome: a constraint one row broke, say) sends the writes again one by one, so
that only the culprit fails, as SQLite's writer retries a failed batch's writes alone.

The store is asyncio-only (psycopg's async connections), so the hot path uses asyncio
futures directly (cheaper than an ``anyio.Event`` per write).
"""

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Final, Generic, TypeVar

import anyio
from anyio.abc import TaskStatus

from taskloom.engine.errors import (
    OutcomeUnknownError,
    PersistenceError,
    StoreClosedError,
    StoreUnavailableError,
)

_P = TypeVar("_P")
Outcome = tuple[bool, Any]
Send = Callable[[Sequence[_P]], Awaitable[list[Outcome]]]

LIMIT: Final = 1000
"""The most writes in one batch (the rest wait for the next)."""


class _Write(Generic[_P]):
    __slots__ = ("flight", "future", "payload")

    def __init__(self, payload: _P, future: "asyncio.Future[Any]") -> None:
        self.payload = payload
        self.future = future
        self.flight: asyncio.Future[None] | None = None
        """Done once the batch that took this write has been answered."""


class Batches(Generic[_P]):
    """One kind of write (a node's start, say), gathered and sent by *send*, one batch of
    at most *limit* writes at a time. *key* names what two writes of one batch must not
    share."""

    def __init__(
        self, send: Send[_P], key: Callable[[_P], Hashable], *, limit: int = LIMIT
    ) -> None:
        self._send = send
        self._key = key
        self._limit = limit
        self._waiting: deque[_Write[_P]] = deque()
        self._wake: asyncio.Future[None] | None = None
        self._closed = False
        self._running = anyio.CancelScope(shield=True)
        """:meth:`run`'s: only :meth:`close` ends it, not a cancel of the scopes around."""

    async def submit(self, payload: _P) -> Any:
        """Send *payload* with the writes waiting beside it; its value, or its refusal
        raised. A cancel before its batch leaves withdraws it; once the batch left, the
        caller waits for its outcome (the write may land) and then takes the cancel."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        write = _Write(payload, asyncio.get_running_loop().create_future())
        self._waiting.append(write)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        try:
            return await write.future
        except asyncio.CancelledError:
            if write.flight is None:  # not sent: withdrawn
                with contextlib.suppress(ValueError):  # (refused meanwhile: the store closed)
                    self._waiting.remove(write)
                raise
            with anyio.CancelScope(shield=True):
                await asyncio.shield(write.flight)
            raise

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send the batches until :meth:`close`; then refuse what still waits. A cancel
        of the scopes around does not stop it: the store's user, cancelled too (a
        SIGTERM), may still write a node's end in a shielded scope until its block ends
        (the pool stays open until then, too)."""
        loop = asyncio.get_running_loop()
        batch: list[_Write[_P]] = []
        flight: asyncio.Future[None] | None = None
        try:
            with self._running:
                task_status.started()
                while True:
                    if not self._waiting:
                        self._wake = loop.create_future()
                        await self._wake
                        # the writes that become ready on this turn of the loop join in
                        await anyio.lowlevel.checkpoint()
                    batch = self._take()
                    flight = loop.create_future()
                    for write in batch:
                        write.flight = flight
                    with anyio.CancelScope(shield=True):
                        outcomes = await self._outcomes([write.payload for write in batch])
                    for write, outcome in zip(batch, outcomes, strict=True):
                        _settle(write.future, outcome)
                    flight.set_result(None)
        finally:
            self._closed = True
            # a batch cut short (never, but for a bug): its callers must not wait forever
            unknown = (False, OutcomeUnknownError("the store stopped while sending the write"))
            for write in batch:
                _settle(write.future, unknown)
            if flight is not None and not flight.done():
                flight.set_result(None)
            closed = (False, StoreClosedError("the store is closed"))
            while self._waiting:
                _settle(self._waiting.popleft().future, closed)

    def close(self) -> None:
        """Stop :meth:`run` once the batch in flight is answered."""
        self._running.cancel()

    def _take(self) -> list[_Write[_P]]:
        """The writes of the next batch, in their order, no two of one key."""
        waiting, later = self._waiting, deque[_Write[_P]]()
        batch: list[_Write[_P]] = []
        keys: set[Hashable] = set()
        while waiting and len(batch) < self._limit:
            write = waiting.popleft()
            key = self._key(write.payload)
            if key in keys:
                later.append(write)
            else:
                keys.add(key)
                batch.append(write)
        later.extend(waiting)
        self._waiting = later
        return batch

    async def _outcomes(self, payloads: list[_P]) -> list[Outcome]:
        """*send*'s outcomes; on a statement's own error, each write sent alone."""
        try:
            return await self._send(payloads)
        except StoreUnavailableError as error:  # an outage, an unknown outcome: all of them
            return [(False, error)] * len(payloads)
        except PersistenceError as error:
            if len(payloads) == 1:
                return [(False, error)]
        except Exception as error:  # noqa: BLE001  # every caller's answer
            return [(False, error)] * len(payloads)
        outcomes: list[Outcome] = []
        for payload in payloads:
            outcomes.extend(await self._outcomes([payload]))
        return outcomes


def _settle(future: "asyncio.Future[Any]", outcome: Outcome) -> None:
    """Answer a caller (unless it stopped waiting: a cancel)."""
    if future.done():
        return
    sent, value = outcome
    if sent:
        future.set_result(value)
    else:
        future.set_exception(value)
