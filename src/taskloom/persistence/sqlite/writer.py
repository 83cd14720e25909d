"""Group commit: one writer connection, many concurrent writes, one fsync per batch.

Callers submit a write (a function of the raw connection). A single writer task takes
every write waiting at that moment, runs them in one ``BEGIN IMMEDIATE`` transaction,
each inside its own savepoint so that one write's refusal (a lost compare-and-set, an
illegal transition) undoes only that write, commits once, and wakes every caller. A
caller returns only after its write is committed.

A write is *durable* (the default) or *bookkeeping*. A batch holding a durable write is
committed at the store's ``synchronous`` level (``FULL``: fsynced before anyone is
told); a batch of bookkeeping alone (claims, lease renewals, node starts) at ``NORMAL``:
written to the WAL, so it survives a crash of the process, and fsynced by the next
durable commit, which syncs the whole log. Power loss can undo only bookkeeping that no
durable commit followed, and the engine redoes that work on its own (ADR 0016).

Writes of one kind that can run as one (a run's node starts, or ends, behind one lease:
ADR 0051) name a :class:`Merge`: those in one batch run as one function, in one
savepoint, each caller still answered on its own. A merged write that fails as a whole
(not a refusal) is retried as its members, each alone, like any failed batch.

The store is asyncio-only (aiosqlite), so the hot path uses asyncio futures directly.
"""

import asyncio
import contextlib
import logging
import sqlite3
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeVar, cast

import aiosqlite
import anyio
from anyio.abc import TaskStatus

from taskloom.engine.errors import StoreClosedError, StoreUnavailableError, TaskloomError
from taskloom.persistence.outage import Outage
from taskloom.persistence.sqlite.driver import (
    is_transient,
    retry_transient,
    run_in_thread,
    translate,
)

_T = TypeVar("_T")
logger = logging.getLogger("taskloom.store")
WriteFunction = Callable[[sqlite3.Connection], Any]
_Outcome = tuple[bool, Any]
Synchronous = Literal["FULL", "NORMAL", "EXTRA"]
BOOKKEEPING_LEVEL: Final[Synchronous] = "NORMAL"
CHECKPOINT_EVERY: Final = 1000
"""Inline bookkeeping batches (a page or more each) after which the writer thread
checkpoints, as SQLite's own auto-checkpoint would after 1000 pages."""


ManyFunction = Callable[[Sequence[Any], sqlite3.Connection], list[_Outcome]]
"""Runs many writes' payloads as one, in the writer's transaction: one outcome each,
``(True, value)`` or ``(False, refusal)``, a refused one having written nothing. What it
raises refuses (a ``TaskloomError``) or fails (anything else) every one of them."""


class Merge(NamedTuple):
    """How a write runs together with others of its *key* in the same batch (a tuple:
    two are made per node, and a tuple is made fastest)."""

    key: Hashable
    """Writes with equal keys (and equal *many*) merge."""
    payload: Any
    """This write's part of the merged call."""
    many: ManyFunction
    alone: Callable[[Any, sqlite3.Connection], Any]
    """The write of *payload* alone (``alone(payload, raw)``): what runs when it merges
    with none, built only then (no function made per write for the rare case)."""


class _Write:
    __slots__ = ("durable", "function", "future", "members", "merge")

    def __init__(
        self,
        function: WriteFunction | None,
        durable: bool,
        future: "asyncio.Future[Any] | None",
        merge: Merge | None = None,
        members: "list[_Write] | None" = None,
    ):
        self.function = function
        """What runs; ``None`` for a merged write's member: its merge's ``alone``."""
        self.durable = durable
        self.future = future
        self.merge = merge
        self.members = members
        """For a merged write: the writes it stands for (answered from its outcomes)."""


def _merged(batch: list[_Write]) -> list[_Write]:
    """*batch* with the writes that merge run as one, each group where its first was."""
    if not any(write.merge is not None for write in batch):
        return batch
    groups: dict[tuple[Any, Hashable], list[_Write]] = {}
    order: list[_Write | list[_Write]] = []
    for write in batch:
        merge = write.merge
        if merge is None:
            order.append(write)
            continue
        key = (merge.many, merge.key)
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            order.append(group)
        group.append(write)
    merged: list[_Write] = []
    for item in order:
        if isinstance(item, _Write):
            merged.append(item)
        elif len(item) == 1:
            merged.append(item[0])
        else:
            merge = item[0].merge
            assert merge is not None
            payloads = [write.merge.payload for write in item if write.merge is not None]
            function = partial(merge.many, payloads)
            durable = any(write.durable for write in item)
            merged.append(_Write(function, durable, None, members=item))
    return merged


class GroupCommitWriter:
    """Serialises every write of one process through one connection, in batches."""

    def __init__(
        self,
        connection: aiosqlite.Connection,
        *,
        path: Path,
        max_batch: int,
        lock_retry_s: float,
        synchronous: Synchronous = "FULL",
        inline: sqlite3.Connection | None = None,
        checkpoint_every: int = CHECKPOINT_EVERY,
        outage: Outage | None = None,
    ) -> None:
        self._connection = connection
        self.outage = outage
        """Hears whether the database answered (ADR 0038)."""
        self._inline = inline
        """A second write connection, at ``NORMAL``, used on the event loop's thread for
        batches of bookkeeping alone (see :meth:`_commit_inline`)."""
        self._checkpoint_every = checkpoint_every
        self._inline_since_thread = 0
        """Inline batches since the writer thread's last commit (where SQLite checkpoints
        the log: the inline connection never does, so as not to stall the loop)."""
        self._path = path
        self._max_batch = max_batch
        self._lock_retry_s = lock_retry_s
        self._durable_level = synchronous
        self._level: Synchronous | None = synchronous
        """The level the connection is at now (the store opens it at *synchronous*);
        ``None`` when a failed batch left it unknown."""
        self._queue: deque[_Write] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._closed = False
        self.batches = 0
        """Transactions committed so far (a write count above this means batching worked)."""
        self.synced_batches = 0
        """Of those, the ones committed at the durable level."""
        self.checkpoints = 0
        """Checkpoints run after a stretch of inline bookkeeping (see :meth:`_checkpoint`)."""

    async def submit(
        self,
        function: Callable[[sqlite3.Connection], _T] | None,
        *,
        durable: bool = True,
        merge: Merge | None = None,
    ) -> _T:
        """Run *function* in a write transaction and return its value once committed.

        With ``durable=False`` the write is bookkeeping: committed without its own fsync
        unless it shares a batch with a durable write (see the module docstring). With
        *merge*, it may run merged with others of its kind in the batch (its value is then
        its outcome from the merged call; alone, *function* runs, or the merge's ``alone``
        if *function* is ``None``).

        Raises:
            StoreClosedError: the writer was closed.
            TaskloomError: what *function* raised (its changes were undone).
        """
        return cast(_T, await self.enqueue(function, durable=durable, merge=merge))

    def enqueue(
        self,
        function: Callable[[sqlite3.Connection], Any] | None,
        *,
        durable: bool = True,
        merge: Merge | None = None,
    ) -> "asyncio.Future[Any]":
        """:meth:`submit` without its coroutine: the future its answer settles (a store
        method awaits it directly, one coroutine less per node write)."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        if function is None and merge is None:
            raise ValueError("a write needs a function or a merge")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Write(function, durable, future, merge))
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        return future

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit batches until :meth:`close`, then finish what is queued and return.

        Cancellation does not reach it (one shield for its lifetime, cheaper than one per
        batch): every write submitted is committed and answered, and the store's exit
        calls :meth:`close` before it waits for this to return."""
        loop = asyncio.get_running_loop()
        queue = self._queue
        with anyio.CancelScope(shield=True):
            task_status.started()
            while True:
                if not queue:
                    if self._closed:
                        return
                    self._wakeup = loop.create_future()
                    try:
                        await self._wakeup
                    finally:
                        self._wakeup = None
                    continue
                await asyncio.sleep(0)  # let the writers made ready meanwhile join this batch
                batch = [queue.popleft() for _ in range(min(len(queue), self._max_batch))]
                await self._commit(_merged(batch))
                if self._inline_since_thread >= self._checkpoint_every:
                    await self._checkpoint()

    def close(self) -> None:
        """Refuse new writes; :meth:`run` returns once the queued ones are committed."""
        self._closed = True
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _commit(self, batch: Sequence[_Write]) -> None:
        functions = [_function(write) for write in batch]
        durable = any(write.durable for write in batch)
        try:
            outcomes = None if durable else self._commit_inline(functions)
            if outcomes is None:
                outcomes = await self._commit_in_thread(functions, durable)
        except Exception as error:  # handed to the waiting callers
            self._level = None  # whether the pragma ran is unknown: say it again next time
            alone = [member for write in batch for member in (write.members or [write])]
            if len(alone) > 1:  # find the culprit: every write alone, so others still land
                for write in alone:
                    await self._commit([write])
                return
            future = alone[0].future
            if (
                future is not None
                and future.done()
                and not isinstance(error, StoreUnavailableError)
            ):
                # its caller stopped waiting (a node's end, ADR 0056): nobody else will say
                # it (an outage logs itself)
                logger.warning("a write whose caller had stopped waiting failed", exc_info=error)
            _settle(future, False, error)
            return
        self.batches += 1
        self.synced_batches += durable
        for write, (ok, value) in zip(batch, outcomes, strict=True):
            if write.members is None:
                _settle(write.future, ok, value)
            elif not ok:  # refused as a whole
                for member in write.members:
                    _settle(member.future, False, value)
            else:
                for member, (each_ok, each) in zip(write.members, value, strict=True):
                    _settle(member.future, each_ok, each)

    def _commit_inline(self, functions: Sequence[WriteFunction]) -> list[_Outcome] | None:
        """Bookkeeping on the event loop's thread, on the inline connection: without an
        fsync to wait for, a hop to the writer thread and back costs more than the
        transaction. ``None`` when another process holds the write lock (the writer
        thread then waits for it). Batches never overlap, so the two connections of
        this process never contend."""
        if self._inline is None:
            return None
        try:
            outcomes = _run_batch(functions, None, self._inline)
        except sqlite3.Error as error:
            if is_transient(error):
                return None
            translated = translate(error, self._path)
            if self.outage is not None and isinstance(translated, StoreUnavailableError):
                translated.retry_after_s = self.outage.retry_after_s
                self.outage.failed(error)
            raise translated from error
        self._inline_since_thread += 1
        return outcomes

    async def _checkpoint(self) -> None:
        """Copy the log back into the database from the writer thread: a long stretch of
        bookkeeping alone (lease renewals of long nodes) would otherwise grow the WAL
        until the next durable write. Best effort: another process's readers may hold
        it back, and the next checkpoint takes up what this one left."""
        self._inline_since_thread = 0
        with contextlib.suppress(sqlite3.Error):
            await run_in_thread(self._connection, _passive_checkpoint)
        self.checkpoints += 1

    async def _commit_in_thread(
        self, functions: Sequence[WriteFunction], durable: bool
    ) -> list[_Outcome]:
        level = self._durable_level if durable else BOOKKEEPING_LEVEL
        switch = level if level != self._level else None
        outcomes = await retry_transient(
            partial(run_in_thread, self._connection, partial(_run_batch, functions, switch)),
            path=self._path,
            within_s=self._lock_retry_s,
            outage=self.outage,
        )
        self._level = level
        self._inline_since_thread = 0  # its commit checkpointed as SQLite saw fit
        return outcomes


def _function(write: _Write) -> WriteFunction:
    """What *write* runs: its function, or its merge's write alone."""
    if write.function is not None:
        return write.function
    merge = write.merge
    assert merge is not None  # submit refuses a write with neither
    return partial(merge.alone, merge.payload)


def _settle(future: "asyncio.Future[Any] | None", ok: bool, value: Any) -> None:
    if future is None or future.done():  # the caller gave up waiting; the write stands all the same
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _passive_checkpoint(raw: sqlite3.Connection) -> None:
    raw.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _run_batch(
    functions: Sequence[WriteFunction], switch: str | None, raw: sqlite3.Connection
) -> list[_Outcome]:
    """In the connection's thread: every function in one transaction, one savepoint each
    (a batch of one write needs none: its refusal rolls the transaction back)."""
    if switch is not None:
        raw.execute(f"PRAGMA synchronous = {switch}")
    raw.execute("BEGIN IMMEDIATE")
    if len(functions) == 1:
        return _run_alone(functions[0], raw)
    try:
        outcomes: list[_Outcome] = []
        for function in functions:
            raw.execute("SAVEPOINT write")
            try:
                value = function(raw)
            except (TaskloomError, ValueError) as refusal:  # the write's own verdict
                raw.execute("ROLLBACK TO write")
                raw.execute("RELEASE write")
                outcomes.append((False, refusal))
            else:
                raw.execute("RELEASE write")
                outcomes.append((True, value))
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    return outcomes


def _run_alone(function: WriteFunction, raw: sqlite3.Connection) -> list[_Outcome]:
    """:func:`_run_batch` of one write, in the transaction it began: the transaction is
    the write's savepoint (two statements fewer; most batches of a sequential run, and
    of a run's merged node writes, hold one write)."""
    try:
        try:
            value = function(raw)
        except (TaskloomError, ValueError) as refusal:  # the write's own verdict
            raw.execute("ROLLBACK")
            return [(False, refusal)]
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    return [(True, value)]


__all__ = ("BOOKKEEPING_LEVEL", "GroupCommitWriter", "ManyFunction", "Merge", "Synchronous")
