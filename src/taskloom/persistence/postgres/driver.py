"""Everything that touches psycopg's connections: the pool, one transaction per call with
retries of transient failures, and driver errors translated into engine errors."""

import logging
import re
import select
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import anyio
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.string import TextLoader
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout
from psycopg_pool.pool_async import AddConnection, MaintenanceTask

from taskloom.engine.errors import (
    DatabaseBusyError,
    DatabaseUnavailableError,
    DiskFullError,
    OutcomeUnknownError,
    PersistenceError,
    StoreClosedError,
    StoreUnavailableError,
)
from taskloom.persistence.outage import Outage
from taskloom.persistence.postgres import arrays
from taskloom.persistence.postgres.cursors import Cursor
from taskloom.persistence.postgres.settings import PostgresSettings
from taskloom.persistence.postgres.sqlstate import is_contention, is_transient
from taskloom.persistence.retries import transient_retries

logger = logging.getLogger(__name__)
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
"""psycopg_pool logs a multi-line WARNING for every failed reconnection attempt (several
a second during an outage); the store's own two lines say what happened (ADR 0038)."""

_T = TypeVar("_T")
Connection = psycopg.AsyncConnection[tuple[Any, ...]]
Work = Callable[[Connection], Awaitable[_T]]

WORK_FLOOR_S: Final = 0.5
"""The least time a transaction gets once it holds a connection, even when the
operation's store wait is (nearly) spent: enough for a statement and its commit."""

_NOISE: Final = re.compile(
    r'connection failed: |connection to server at "[^"]*"(?: \([^)]*\))?, port \d+ failed: '
    r"|FATAL:\s+|ERROR:\s+"
)


def one_line(error: BaseException) -> str:
    """The driver's message on one line, without libpq's prefixes and query excerpts."""
    primary = error.diag.message_primary if isinstance(error, psycopg.Error) else None
    text = primary or "; ".join(part.strip() for part in str(error).splitlines() if part.strip())
    return re.sub(r"\s+", " ", _NOISE.sub("", text)).strip() or type(error).__name__


def describe(url: str) -> str:
    """``user@host:port/dbname`` for messages: the URL without its password.

    Raises:
        PersistenceError: the URL is malformed.
    """
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise PersistenceError(f"invalid PostgreSQL URL: {one_line(error)}") from error
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"{user}{host}{port}/{parts.get('dbname') or ''}"


def translate(
    error: psycopg.Error, database: str, *, retry_after_s: float = 5.0
) -> PersistenceError:
    """The engine error for a driver error (the caller chains it as ``__cause__``)."""
    message = one_line(error)
    if is_contention(error):
        return DatabaseBusyError(
            f"PostgreSQL {database} stayed contended: {message}", retry_after_s=retry_after_s
        )
    if error.sqlstate == "53100":
        return DiskFullError(
            f"PostgreSQL {database} has no disk space left: {message}",
            retry_after_s=retry_after_s,
        )
    if isinstance(error, psycopg.OperationalError):
        return DatabaseUnavailableError(
            f"PostgreSQL {database} is unavailable: {message}", retry_after_s=retry_after_s
        )
    return PersistenceError(f"PostgreSQL {database}: {message}")


class _Pool(AsyncConnectionPool[Any]):
    """psycopg's pool with its pause between reconnection attempts capped: it doubles
    from 1 s without a bound, so after a 40 s outage the next attempt could be 16 s away."""

    reconnect_max_s: float = 0.5

    async def schedule_task(self, task: MaintenanceTask, delay: float) -> None:
        """Schedule *task*; a reconnection no later than ``reconnect_max_s`` from now."""
        if isinstance(task, AddConnection):
            delay = min(delay, self.reconnect_max_s)
        await super().schedule_task(task, delay)


def application_name(origin: str) -> str:
    """What a store's connections call themselves (``pg_stat_activity.application_name``)."""
    return f"taskloom-{origin}"


def connection_options(origin: str) -> dict[str, Any]:
    """libpq options of every connection: autocommit (each port method opens its own
    transaction), a name, and TCP keepalives so that a silently lost server is noticed
    within about a minute rather than never; and the cursor that converts a statement's
    text once (ADR 0074)."""
    return {
        "autocommit": True,
        "cursor_factory": Cursor,
        "application_name": application_name(origin),
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }


async def connect(settings: PostgresSettings, database: str, *, origin: str) -> Connection:
    """One autocommit connection, failing fast with a one-line error.

    Raises:
        DatabaseUnavailableError: no server answers, or it refused us (role, password,
            database name).
    """
    try:
        return await psycopg.AsyncConnection.connect(
            settings.url,
            connect_timeout=max(1, round(settings.connect_timeout_s)),
            **connection_options(origin),
        )
    except psycopg.Error as error:
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL {database}: {one_line(error)}"
        ) from error


_BEGIN: Final = "BEGIN"
_BOOKKEEPING: Final = "; SET LOCAL synchronous_commit = off"
_GENERIC_PLANS: Final = "; SET LOCAL plan_cache_mode = force_generic_plan"
"""A transaction's settings travel with its BEGIN, in one round trip: with no parameters
psycopg sends the simple protocol, which takes several statements (ADR 0047, 0063)."""


def begin_statement(*, durable: bool = True, generic_plans: bool = False) -> str:
    """The BEGIN of a transaction: bookkeeping unless *durable* (ADR 0016); with
    *generic_plans*, its prepared statements use their generic plan (ADR 0063)."""
    return _BEGIN + ("" if durable else _BOOKKEEPING) + (_GENERIC_PLANS if generic_plans else "")


async def _roll_back(connection: Connection) -> None:
    """End the open transaction of *connection* with a rollback; a connection too broken
    for it is left to the pool, which discards it (the caller's error is what counts)."""
    if connection.pgconn.transaction_status in _OPEN:
        try:
            await connection.execute("ROLLBACK")
        except psycopg.Error as error:
            logger.debug("a rollback failed: %s", one_line(error))


def _has_input(connection: Connection) -> bool:
    """Whether the server sent *connection* something unasked (an idle connection's
    error or end of stream: the server closed it), checked without waiting."""
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True  # no usable socket: let the transaction path find out
    return bool(readable)


def _refused(error: psycopg.Error) -> bool:
    """Whether the server ended a statement with an ERROR (contention, a cancel or
    ``statement_timeout``, disk full, out of memory): it rolled back the statement's own
    transaction and the session goes on, so nothing was written. An error after the
    commit point is a PANIC; a FATAL (the backend terminated, as a fast shutdown does:
    it may follow a commit) or no answer at all leaves the outcome unknown."""
    return error.diag.severity_nonlocalized == "ERROR"


_OPEN: Final = frozenset(
    {psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR}
)


class _Progress:
    """How far one transaction got: whether its commit had begun (filled in by
    :meth:`Database._on`, read after a deadline cut it short)."""

    committing: bool = False


class Database:
    """A connection pool and the one way to use it: :meth:`transaction` or :meth:`read`."""

    def __init__(self, settings: PostgresSettings, name: str, *, origin: str) -> None:
        self.settings = settings
        self.name = name
        self.origin = origin
        """Written into every connection's ``taskloom.origin`` setting (see ``notify``)."""
        pool = _Pool(
            settings.url,
            min_size=settings.min_connections,
            max_size=settings.max_connections,
            timeout=settings.acquire_wait_s,
            kwargs=connection_options(origin),
            configure=self._configure,
            name=f"taskloom:{name}",
            open=False,
        )
        pool.reconnect_max_s = settings.reconnect_max_s
        self.pool: AsyncConnectionPool[Connection] = pool
        self.outage = Outage(f"PostgreSQL {name}", retry_after_s=settings.store_wait_s)
        """Logs the database's going and coming back; calls wake-ups when it is back."""

    @asynccontextmanager
    async def opened(self) -> AsyncIterator["Database"]:
        """Open the pool (waiting for its first connections) and close it on exit."""
        try:
            await self.pool.open(wait=True, timeout=self.settings.connect_timeout_s)
        except PoolTimeout as error:
            raise DatabaseUnavailableError(
                f"PostgreSQL {self.name}: no connection within "
                f"{self.settings.connect_timeout_s:g} s"
            ) from error
        try:
            yield self
        finally:
            with anyio.CancelScope(shield=True):
                await self.pool.close()

    async def _configure(self, connection: Connection) -> None:
        connection.adapters.register_loader("json", TextLoader)  # pydantic parses task bodies
        arrays.register(connection.adapters)  # the batches' arrays bound as typed (ADR 0074)
        await connection.execute(
            "SELECT set_config('search_path', %s, false), set_config('TimeZone', 'UTC', false),"
            " set_config('taskloom.origin', %s, false)",
            (self.settings.schema_name, self.origin),
        )

    async def transaction(
        self, work: Work[_T], *, durable: bool = True, generic_plans: bool = False
    ) -> _T:
        """Run *work* in one transaction, retrying transient failures.

        A failure while committing is not retried (the write may have landed). With
        ``durable=False`` the transaction is bookkeeping (ADR 0016): committed with
        ``synchronous_commit = off``, so it does not wait for its WAL flush; the server
        flushes it with the next durable commit, which waits for every earlier record.
        With ``generic_plans=True`` its prepared statements run on their generic plan
        (``plan_cache_mode = force_generic_plan`` for this transaction only): for the
        worker's statements over arrays, whose plan PostgreSQL would otherwise make
        again at every execution (ADR 0063).

        Raises:
            PersistenceError: a translated driver error.
            TaskloomError: whatever *work* raised (its changes were rolled back).
        """
        opening = begin_statement(durable=durable, generic_plans=generic_plans)
        return await self._retrying(work, write=True, begin=opening)

    async def read(self, work: Work[_T]) -> _T:
        """Run *work* outside a transaction (for single-statement reads), with retries."""
        return await self._retrying(work, write=False)

    async def alone(self, work: Work[_T]) -> _T:
        """Run *work*, which sends one write statement, as its own transaction: one round
        trip where :meth:`transaction` takes three (BEGIN, the statement, COMMIT). The
        server commits it when the statement ends, durably (``synchronous_commit`` as
        configured: on by default). A statement the server ends with an ERROR wrote
        nothing: retried when transient (a deadlock, a lock timeout, out of memory),
        translated otherwise, as in a transaction; a connection lost (or a backend
        terminated) while it runs leaves the outcome unknown, as a failed COMMIT does
        (``OutcomeUnknownError``, never retried).

        Raises:
            OutcomeUnknownError: the connection failed while the statement ran.
            PersistenceError: a translated driver error (nothing was written).
            TaskloomError: whatever *work* raised after the statement (it was committed).
        """
        return await self._retrying(work, write=False, alone=True)

    async def _retrying(
        self, work: Work[_T], *, write: bool, begin: str = _BEGIN, alone: bool = False
    ) -> _T:
        """*work* with retries; the whole operation waits at most ``store_wait_s`` (the
        retry window and the connection waits both end by then)."""
        started = time.monotonic()
        deadline = started + self.settings.store_wait_s
        try:
            # the fast path: no retry machinery
            value = await self._once(work, write=write, begin=begin, alone=alone, deadline=deadline)
        except psycopg.Error as error:
            if not is_transient(error):
                raise self._translated(error, started) from error
            self.outage.stumbled()
        except StoreUnavailableError as error:
            self._gave_up(error, started)
            raise
        else:
            self.outage.answered()
            return value
        retrying = transient_retries(
            is_transient,
            within_s=self.settings.retry_window_s,
            first_s=0.01,
            max_s=1.0,
            jitter_s=0.05,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    value = await self._once(
                        work, write=write, begin=begin, alone=alone, deadline=deadline
                    )
        except psycopg.Error as error:
            raise self._translated(error, started) from error
        except StoreUnavailableError as error:
            self._gave_up(error, started)
            raise
        self.outage.answered()
        return value

    def _translated(self, error: psycopg.Error, started: float) -> PersistenceError:
        translated = translate(error, self.name, retry_after_s=self.settings.store_wait_s)
        if isinstance(translated, StoreUnavailableError):
            self.outage.failed(error, started=started)
        return translated

    def _gave_up(self, error: StoreUnavailableError, started: float) -> None:
        self.outage.failed(error.__cause__ or error, started=started)

    async def _once(
        self,
        work: Work[_T],
        *,
        write: bool,
        begin: str = _BEGIN,
        alone: bool = False,
        deadline: float,
    ) -> _T:
        """*work* on a pooled connection, waiting for one until *deadline* (monotonic) at
        most. Waiting for the connection can be cancelled; the work and the connection's
        return cannot: the work runs until *deadline* (at least ``WORK_FLOOR_S``), so a
        cancel (a run cancelled while its nodes write) takes effect as soon as the
        transaction has ended. psycopg answers a cancel inside a query by cancelling the
        query on the server, and anyio cancels that too (its cancellation is delivered at
        every await in the cancelled scope), so psycopg closed the connection with a
        warning and the pool had to open another (issue 26).

        Raises:
            DatabaseUnavailableError: no connection, or the work did not end by
                *deadline* before committing (nothing was written).
            OutcomeUnknownError: *deadline* passed while committing (the write may have
                landed).
        """
        # A cancelled caller starts no work: a free connection is handed over without a
        # checkpoint, and the work is shielded, so a loop of reads would never see it.
        await anyio.lowlevel.checkpoint_if_cancelled()
        wait_s = max(0.0, min(self.settings.acquire_wait_s, deadline - time.monotonic()))
        try:
            connection = await self.pool.getconn(timeout=wait_s)
        except PoolClosed as error:
            raise StoreClosedError("the store is closed") from error
        except PoolTimeout as error:
            raise DatabaseUnavailableError(
                f"PostgreSQL {self.name} is unavailable: no connection within "
                f"{self.settings.store_wait_s:g} s",
                retry_after_s=self.settings.store_wait_s,
            ) from error
        progress = _Progress()
        with anyio.CancelScope(shield=True) as shielded:
            left_s = max(WORK_FLOOR_S, deadline - time.monotonic())
            shielded.deadline = anyio.current_time() + left_s
            try:
                if alone:
                    return await self._alone(connection, work, progress=progress)
                return await self._on(connection, work, write=write, begin=begin, progress=progress)
            finally:
                with anyio.CancelScope(shield=True):  # past the deadline too
                    await self.pool.putconn(connection)
        assert shielded.cancelled_caught  # the scope returned or raised otherwise
        if progress.committing:
            raise OutcomeUnknownError(
                f"PostgreSQL {self.name}: the commit did not end within "
                f"{self.settings.store_wait_s:g} s, so the write may or may not have landed",
                retry_after_s=self.settings.store_wait_s,
            )
        raise DatabaseUnavailableError(
            f"PostgreSQL {self.name} is unavailable: an operation did not end within "
            f"{self.settings.store_wait_s:g} s",
            retry_after_s=self.settings.store_wait_s,
        )

    async def _alone(self, connection: Connection, work: Work[_T], *, progress: "_Progress") -> _T:
        """*work*'s one statement in autocommit: it commits as it ends, so from the
        moment it is sent a lost connection leaves the outcome unknown. A connection
        with something to read before anything was sent (the server closed it while it
        was pooled: a restart, a terminated backend) runs it in a transaction instead,
        whose failures before COMMIT are known to have written nothing (and retried)."""
        if _has_input(connection):
            return await self._on(connection, work, write=True, begin=_BEGIN, progress=progress)
        progress.committing = True
        try:
            return await work(connection)
        except psycopg.OperationalError as error:
            if _refused(error):  # nothing was written: retried or translated as any
                raise
            raise OutcomeUnknownError(
                f"PostgreSQL {self.name}: the connection failed during a write, "
                f"so it may or may not have landed: {one_line(error)}",
                retry_after_s=self.settings.store_wait_s,
            ) from error

    async def _on(
        self,
        connection: Connection,
        work: Work[_T],
        *,
        write: bool,
        begin: str,
        progress: "_Progress",
    ) -> _T:
        if not write:
            return await work(connection)
        try:
            await connection.execute(begin)
            try:
                value = await work(connection)
            except BaseException:
                await _roll_back(connection)
                raise
            progress.committing = True
            await connection.execute("COMMIT")
        except psycopg.OperationalError as error:
            if progress.committing:
                raise OutcomeUnknownError(
                    f"PostgreSQL {self.name}: the connection failed while committing, "
                    f"so the write may or may not have landed: {one_line(error)}",
                    retry_after_s=self.settings.store_wait_s,
                ) from error
            raise
        return value
