"""Group commit: one writer connection, many concurrent writes, one fsync per batch.

Callers submit a write (a function of the raw connection). A single writer task takes
every write waiting at that moment, runs them in one ``BEGIN IMMEDIATE`` transaction,
each inside its own savepoint so that one write's refusal (a lost compare-and-set, an
illegal transition) undoes only that write, commits once, and wakes every caller. A
caller returns only after its write is committed.
"""

import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import anyio
from anyio.abc import TaskStatus

from taskloom.engine.errors import StoreClosedError, TaskloomError
from taskloom.persistence.sqlite.driver import retry_transient, run_in_thread

_T = TypeVar("_T")
WriteFunction = Callable[[sqlite3.Connection], Any]
_Outcome = tuple[bool, Any]


@dataclass(eq=False)
class _Write:
    function: WriteFunction
    done: anyio.Event = field(default_factory=anyio.Event)
    value: Any = None
    error: BaseException | None = None


class GroupCommitWriter:
    """Serialises every write of one process through one connection, in batches."""

    def __init__(
        self, connection: aiosqlite.Connection, *, path: Path, max_batch: int, lock_retry_s: float
    ) -> None:
        self._connection = connection
        self._path = path
        self._max_batch = max_batch
        self._lock_retry_s = lock_retry_s
        self._send, self._receive = anyio.create_memory_object_stream[_Write](math.inf)
        self.batches = 0
        """Transactions committed so far (a write count above this means batching worked)."""

    async def submit(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run *function* in a write transaction and return its value once committed.

        Raises:
            StoreClosedError: the writer was closed.
            TaskloomError: what *function* raised (its changes were undone).
        """
        write = _Write(function)
        try:
            self._send.send_nowait(write)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise StoreClosedError("the store is closed") from None
        await write.done.wait()
        if write.error is not None:
            raise write.error
        return cast(_T, write.value)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Commit batches until :meth:`close`, then finish what is queued and return."""
        task_status.started()
        async with self._receive:
            async for first in self._receive:
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except anyio.WouldBlock:
                        break
                with anyio.CancelScope(shield=True):  # a started commit always finishes
                    await self._commit(batch)

    def close(self) -> None:
        """Refuse new writes; :meth:`run` returns once the queued ones are committed."""
        self._send.close()

    async def _commit(self, batch: Sequence[_Write]) -> None:
        functions = [write.function for write in batch]
        try:
            outcomes = await retry_transient(
                partial(run_in_thread, self._connection, partial(_run_batch, functions)),
                path=self._path,
                within_s=self._lock_retry_s,
            )
        except Exception as error:  # noqa: BLE001  # handed to the waiting callers
            if len(batch) > 1:  # find the culprit: every write alone, so others still land
                for write in batch:
                    await self._commit([write])
                return
            batch[0].error = error
            batch[0].done.set()
            return
        self.batches += 1
        for write, (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                write.value = value
            else:
                write.error = value
            write.done.set()


def _run_batch(functions: Sequence[WriteFunction], raw: sqlite3.Connection) -> list[_Outcome]:
    """In the connection's thread: every function in one transaction, one savepoint each."""
    raw.execute("BEGIN IMMEDIATE")
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
