"""Everything that touches the driver directly: running a function in a connection's
thread, translating driver errors into engine errors, and retrying lock contention."""

import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, TypeVar

import aiosqlite
import anyio

from taskloom.engine.errors import (
    CorruptDatabaseError,
    DatabaseBusyError,
    DiskFullError,
    PersistenceError,
    StoreUnavailableError,
)
from taskloom.persistence.outage import Outage
from taskloom.persistence.retries import transient_retries

_T = TypeVar("_T")

_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


def database_uri(path: Path, *, read_only: bool) -> tuple[str | Path, bool]:
    """What to pass to ``sqlite3.connect`` for *path*, and whether it is a URI: read-only
    opens use ``file:PATH?mode=ro``, which never creates the file."""
    if not read_only:
        return path, False
    return f"{path.absolute().as_uri()}?mode=ro", True


async def connect(path: Path, *, read_only: bool = False) -> aiosqlite.Connection:
    """An autocommit connection (transactions are explicit) with its own thread."""
    database, uri = database_uri(path, read_only=read_only)
    connection = aiosqlite.connect(database, isolation_level=None, uri=uri)
    try:
        # Shielded: a cancel (Ctrl-C at start-up) would leave the connection's thread
        # opening it, unowned, to report to an event loop closed by then (a traceback).
        with anyio.CancelScope(shield=True):
            opened = await connection
    except sqlite3.Error as error:
        # aiosqlite stops the connection's thread without waiting for it; wait here, or
        # the thread may report its end to an event loop that is closed by then.
        await anyio.to_thread.run_sync(connection._thread.join)
        raise translate(error, path) from error
    return opened


async def run_in_thread(
    connection: aiosqlite.Connection, function: Callable[[sqlite3.Connection], _T]
) -> _T:
    """Run *function* with the raw connection in the connection's own thread.

    A whole transaction then costs one hop between the event loop and the thread instead
    of one per statement. This uses ``aiosqlite.Connection._execute``, the method every
    public aiosqlite call goes through; aiosqlite is pinned for that reason (ADR 0003).
    """
    raw = connection._conn  # the sqlite3 connection aiosqlite wraps
    value: _T = await connection._execute(function, raw)  # type: ignore[no-untyped-call]  # see docstring
    return value


def is_transient(error: BaseException) -> bool:
    """True for lock contention, the only driver error worth retrying."""
    return isinstance(error, sqlite3.Error) and _base_code(error) in _BUSY_CODES


async def retry_transient(
    attempt: Callable[[], Awaitable[_T]],
    *,
    path: Path,
    within_s: float,
    outage: Outage | None = None,
    tells: bool = True,
) -> _T:
    """Await *attempt*, retrying lock contention for *within_s* seconds with jittered
    backoff; *outage*, if given, sets the retry hint of the errors, and when *tells*
    hears whether the database answered (ADR 0038). A read succeeds under another
    process's write lock (WAL), so a read's success does not say that a locked database
    is back, and its failure would open an outage no write may ever close: reads pass
    ``tells=False`` unless they are all the process does (a read-only store).

    Raises:
        PersistenceError: a translated driver error (``DatabaseBusyError`` once retries run
            out, ``DiskFullError`` for a full disk).
    """
    told = outage if tells else None
    started = time.monotonic()
    try:
        value = await _attempt(attempt, path, outage, told, started)
    except _Retry:
        pass
    else:
        if told is not None:
            told.answered()
        return value
    retrying = transient_retries(
        is_transient, within_s=within_s, first_s=0.005, max_s=0.5, jitter_s=0.01
    )
    try:
        async for try_ in retrying:
            with try_:
                value = await attempt()
    except sqlite3.Error as error:
        raise _translated(error, path, outage, told, started) from error
    if told is not None:
        told.answered()
    return value


class _Retry(Exception):
    """The first attempt met a lock: retry."""


async def _attempt(
    attempt: Callable[[], Awaitable[_T]],
    path: Path,
    outage: Outage | None,
    told: Outage | None,
    started: float,
) -> _T:
    try:
        return await attempt()  # the fast path: no retry machinery unless it is needed
    except sqlite3.Error as error:
        if not is_transient(error):
            raise _translated(error, path, outage, told, started) from error
        if told is not None:
            told.stumbled()
        raise _Retry from error


def _translated(
    error: sqlite3.Error, path: Path, outage: Outage | None, told: Outage | None, started: float
) -> PersistenceError:
    translated = translate(error, path)
    if isinstance(translated, StoreUnavailableError):
        if outage is not None:
            translated.retry_after_s = outage.retry_after_s
        if told is not None:
            told.failed(error, started=started)
    return translated


def translate(error: sqlite3.Error, path: Path) -> PersistenceError:
    """The engine error for a driver error (the caller chains it as ``__cause__``)."""
    code = _base_code(error)
    if code in _BUSY_CODES:
        return DatabaseBusyError(f"the database {path} is locked by another process ({error})")
    if code == sqlite3.SQLITE_FULL:
        return DiskFullError(f"the disk of the database {path} is full ({error})")
    if code in _CORRUPT_CODES:
        return CorruptDatabaseError(f"{path} is not a readable taskloom database: {error}")
    return PersistenceError(f"database {path}: {error}")


def _base_code(error: sqlite3.Error) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None
