"""SqliteTaskStore: the embedded default store (WAL, group commit, ``synchronous=FULL``)."""

import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import ClassVar, Self, TypeVar

import aiosqlite
import anyio

from taskloom.engine.claims import WorkflowKey
from taskloom.engine.errors import PersistenceError, SchemaVersionError
from taskloom.engine.history import HistoryEntry
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import Lease, NodeEnd, NodeRun, NodeStart
from taskloom.engine.tokens import TokenRecord
from taskloom.engine.versions import StoredVersion
from taskloom.persistence.outage import Outage
from taskloom.persistence.sql import history as sql_history
from taskloom.persistence.sql import tasks
from taskloom.persistence.sql.dialect import SQLITE
from taskloom.persistence.sql.script import Script, Statement, run_sync
from taskloom.persistence.sql.store import Make, SqlStore
from taskloom.persistence.sqlite import history, nodes, rows, schema, tokens, versions
from taskloom.persistence.sqlite.driver import (
    connect,
    database_uri,
    is_transient,
    retry_transient,
    run_in_thread,
    translate,
)
from taskloom.persistence.sqlite.maintenance import StoreHealth, health
from taskloom.persistence.sqlite.settings import SqliteSettings
from taskloom.persistence.sqlite.writer import BOOKKEEPING_LEVEL, GroupCommitWriter, Merge

_T = TypeVar("_T")


class SqliteTaskStore(SqlStore):
    """Tasks in one SQLite file, shared safely by several processes.

    Writes go through one group-committing writer connection; reads use a second
    connection, so they never wait behind an fsync. Open it with :meth:`open`. The
    store rules are :class:`taskloom.persistence.sql.store.SqlStore`'s.
    """

    dialect = SQLITE
    node_ends_queued: ClassVar[bool] = True
    """A node's end is in the writer's queue once ``end_node`` is called, and the writer
    commits every queued write before the store closes (``engine.runs.ends_queued``). A
    subclass whose ``end_node`` yields before it calls this one's sets it to ``False``
    (not ``Final``, so that it can)."""

    def __init__(
        self,
        settings: SqliteSettings,
        writer: GroupCommitWriter,
        reader: aiosqlite.Connection,
        inline: sqlite3.Connection,
    ) -> None:
        self.settings = settings
        self.writer = writer
        self._reader = reader
        self._inline = inline
        """Point reads on the event loop's thread (see :meth:`_read_point`)."""

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: SqliteSettings | Path | str) -> AsyncIterator[Self]:
        """Open (creating and migrating if needed) the database, and close it on exit.

        Raises:
            CorruptDatabaseError: the file is damaged or not a database.
            ForeignDatabaseError: the file is another application's database.
            SchemaVersionError: the file was written by a newer taskloom.
            PersistenceError: any other failure to open it.
        """
        if not isinstance(settings, SqliteSettings):
            settings = SqliteSettings(path=Path(settings))
        path = settings.path
        read_only = settings.read_only
        if read_only and not await anyio.Path(path).is_file():
            raise PersistenceError(f"no taskloom database at {path}")
        if not read_only:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise PersistenceError(f"cannot create the folder of {path}: {error}") from error
        outage = Outage(f"SQLite database {path}", retry_after_s=settings.store_wait_s)
        writer_connection = await connect(path, read_only=read_only)
        reader_connection: aiosqlite.Connection | None = None
        inline: sqlite3.Connection | None = None
        inline_writer: sqlite3.Connection | None = None
        prepare = _prepare_read_only if read_only else _prepare_writer
        try:
            await retry_transient(
                partial(run_in_thread, writer_connection, partial(prepare, settings)),
                path=path,
                within_s=settings.lock_retry_window_s,
            )
            reader_connection = await connect(path, read_only=read_only)
            await retry_transient(
                partial(run_in_thread, reader_connection, partial(_prepare_reader, settings)),
                path=path,
                within_s=settings.lock_retry_window_s,
            )
            inline = _connect_inline(settings, _prepare_inline_reader)
            inline_writer = _connect_inline(settings, _prepare_inline_writer)
            writer = GroupCommitWriter(
                writer_connection,
                path=path,
                max_batch=settings.max_batch,
                lock_retry_s=settings.lock_retry_window_s,
                synchronous=settings.synchronous,
                inline=inline_writer,
                outage=outage,
            )
            async with anyio.create_task_group() as task_group:
                await task_group.start(writer.run)
                try:
                    yield cls(settings, writer, reader_connection, inline)
                finally:
                    writer.close()
        finally:
            for connection in (inline, inline_writer):
                if connection is not None:
                    connection.close()
            with anyio.CancelScope(shield=True):
                if reader_connection is not None:
                    await reader_connection.close()
                await writer_connection.close()

    def _create(
        self, task: Task, now: datetime, row: Task | None = None
    ) -> Script[tuple[Task, bool]]:
        """See :meth:`SqlStore._create`: the holder of the key is read under the write
        lock (one writer holds the database), an expired one deleted."""
        stored = task if row is None else row
        if task.idempotency_key is not None:
            holder = yield from tasks.key_holder(SQLITE, task, now)
            if holder is not None:
                return holder, False
        yield Statement(rows.INSERT_SQL, rows.insert_row(stored))
        yield from sql_history.record(SQLITE, None, task)
        return stored, True

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """See :meth:`taskloom.engine.ports.TaskStore.history`."""
        return await self._read(partial(_history, task_id, now))

    # -- node checkpoints (RunStore): merged in the writer's batches (ADR 0051) ---------------

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`."""
        payload = (lease, start, SQLITE.time(now))
        merge = Merge((lease.task_id, lease.token), payload, nodes.start_many, nodes.start_one)
        # survives a crash of the process; power loss re-runs the node
        run: NodeRun = await self.writer.enqueue(None, durable=False, merge=merge)
        return run

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node`."""
        payload = (lease, end, SQLITE.time(now))
        merge = Merge((lease.task_id, lease.token), payload, nodes.end_many, nodes.end_one)
        run: NodeRun = await self.writer.enqueue(None, merge=merge)
        return run

    # -- versions (VersionStore) ------------------------------------------------------------

    async def record_loaded(
        self, process: str, loaded: Iterable[WorkflowKey], now: datetime, until: datetime
    ) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.record_loaded`."""
        record = partial(
            versions.record_loaded, process=process, loaded=list(loaded), now=now, until=until
        )
        await self.writer.submit(partial(_call_with_raw, record), durable=False)

    async def forget_process(self, process: str) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.forget_process`."""
        forget = partial(versions.forget_process, process=process)
        await self.writer.submit(partial(_call_with_raw, forget), durable=False)

    async def live_versions(self, now: datetime) -> frozenset[WorkflowKey]:
        """See :meth:`taskloom.engine.versions.VersionStore.live_versions`."""
        return await self._read(partial(versions.live_versions, now=now))

    async def first_live_process(self, now: datetime) -> str | None:
        """See :meth:`taskloom.engine.versions.VersionStore.first_live_process`."""
        return await self._read(partial(versions.first_live_process, now=now))

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
        return await self._read(partial(versions.unfinished_versions, now=now))

    # -- tokens (TokenStore) ----------------------------------------------------------------

    async def add_token(self, record: TokenRecord) -> None:
        """See :meth:`taskloom.engine.tokens.TokenStore.add_token`."""
        await self.writer.submit(partial(_call_with_raw, partial(tokens.add_token, record=record)))

    async def find_token(self, token_id: str) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_token`."""
        return await self._read_point(partial(tokens.find_token, token_id=token_id))

    async def list_tokens(self) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.list_tokens`."""
        return await self._read(tokens.list_tokens)

    async def find_tokens(self, token_ids: Collection[str]) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_tokens`."""
        return await self._read_point(partial(tokens.find_tokens, token_ids=list(token_ids)))

    async def revoke_token(self, token_id: str, now: datetime) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.revoke_token`."""
        return await self.writer.submit(
            partial(_call_with_raw, partial(tokens.revoke_token, token_id=token_id, now=now))
        )

    async def running_versions(self) -> dict[TaskId, int]:
        """Each running task's id and version (an index range of ``(state, seq)``): what
        :func:`taskloom.engine.foreign.follow_foreign_changes` compares between polls to
        find what other processes changed (SQLite cannot announce it). Running tasks are
        as many as the workers run at once, however long the queue."""
        return await self._read(_running_versions)

    async def health(self) -> StoreHealth:
        """SQLite's integrity and foreign-key checks, the schema version and task counts."""
        return await self._read(health)

    async def _transact(self, make: Make[_T], *, durable: bool = True) -> _T:
        return await self.writer.submit(partial(_script, make), durable=durable)

    async def _query(self, make: Make[_T], *, point: bool = False) -> _T:
        return await (self._read_point if point else self._read)(partial(_script, make))

    async def _read_point(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run a primary-key lookup on the event loop's own thread: it costs less than
        the two thread hops of :meth:`_read`. A reader in WAL mode does not wait for
        writers; should the file be locked all the same (a WAL recovery under way), the
        read goes to the reader thread, which waits and retries. On a read-only store,
        reads are all there is to say that the database is back (see :meth:`_read`).
        It yields to the loop first, as any await of a read must: a poll loop of reads
        would otherwise never let the run it waits for go on, nor a timeout fire."""
        await anyio.lowlevel.checkpoint()
        try:
            value = function(self._inline)
        except sqlite3.Error as error:
            if not is_transient(error):
                raise translate(error, self.settings.path) from error
        else:
            if self.settings.read_only and self.writer.outage is not None:
                self.writer.outage.answered()
            return value
        return await self._read(function)

    async def _read(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        return await retry_transient(
            partial(run_in_thread, self._reader, function),
            path=self.settings.path,
            within_s=self.settings.lock_retry_window_s,
            outage=self.writer.outage,
            # reads go on under another process's write lock: only writes tell an outage,
            # unless reads are all this store does
            tells=self.settings.read_only,
        )

    def on_back(self, wake_up: Callable[[], None]) -> None:
        """Call *wake_up* whenever the database answers again after it was locked past the
        store's wait or its disk was full."""
        if self.writer.outage is not None:
            self.writer.outage.on_back(wake_up)


def _running_versions(raw: sqlite3.Connection) -> dict[TaskId, int]:
    found = raw.execute("SELECT id, version FROM tasks WHERE state = 'running'")
    return {TaskId(task_id): version for task_id, version in found}


# -- connection set-up (in the connection's thread) -------------------------------------


def _prepare_writer(settings: SqliteSettings, raw: sqlite3.Connection) -> None:
    raw.execute(f"PRAGMA busy_timeout = {settings.busy_timeout_ms:d}")
    # Refuse a file that is not ours, damaged or too new before changing anything in it.
    schema.check_identity(raw, settings.path)
    if settings.verify_on_open:
        schema.check_integrity(raw, settings.path)
    schema.check_version(raw, settings.path)
    mode = raw.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise PersistenceError(f"{settings.path}: cannot use write-ahead logging (got {mode})")
    raw.execute(f"PRAGMA synchronous = {settings.synchronous}")
    raw.execute("PRAGMA foreign_keys = ON")
    schema.migrate(raw, settings.path)


def _prepare_read_only(settings: SqliteSettings, raw: sqlite3.Connection) -> None:
    """Check a file opened read-only: ours, and at the schema this taskloom writes (it
    cannot be migrated from here)."""
    raw.execute(f"PRAGMA busy_timeout = {settings.busy_timeout_ms:d}")
    raw.execute("PRAGMA query_only = ON")
    schema.check_identity(raw, settings.path)
    current = schema.check_version(raw, settings.path)
    if current < schema.latest_version():
        raise SchemaVersionError(
            f"{settings.path} has schema version {current}, older than this taskloom's "
            f"({schema.latest_version()}); upgrade it with: taskloom db migrate --db {settings.path}"
        )


def _connect_inline(
    settings: SqliteSettings, prepare: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """A connection used on the event loop's own thread. It never waits for a lock
    (``busy_timeout`` 0), so it cannot stall the loop: its callers hand the work to a
    connection thread when the file is locked."""
    database, uri = database_uri(settings.path, read_only=settings.read_only)
    try:
        raw = sqlite3.connect(database, isolation_level=None, check_same_thread=False, uri=uri)
    except sqlite3.Error as error:
        raise translate(error, settings.path) from error
    try:
        raw.execute("PRAGMA busy_timeout = 0")
        prepare(raw)
    except sqlite3.Error as error:
        raw.close()
        raise translate(error, settings.path) from error
    return raw


def _prepare_inline_reader(raw: sqlite3.Connection) -> None:
    raw.execute("PRAGMA query_only = ON")


def _prepare_inline_writer(raw: sqlite3.Connection) -> None:
    raw.execute(f"PRAGMA synchronous = {BOOKKEEPING_LEVEL}")
    raw.execute("PRAGMA foreign_keys = ON")
    raw.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints stay in the writer thread


def _prepare_reader(settings: SqliteSettings, raw: sqlite3.Connection) -> None:
    raw.execute(f"PRAGMA busy_timeout = {settings.busy_timeout_ms:d}")
    raw.execute("PRAGMA query_only = ON")


# -- transactions (in the connection's thread) ------------------------------------------


def _get(task_id: TaskId, now: datetime, raw: sqlite3.Connection) -> Task | None:
    return run_sync(tasks.get(SQLITE, task_id, now), raw.execute)


def _history(
    task_id: TaskId, now: datetime, raw: sqlite3.Connection
) -> tuple[Task, Sequence[HistoryEntry]] | None:
    raw.execute("BEGIN")  # one snapshot for the task and its rows
    try:
        task = _get(task_id, now, raw)
        return None if task is None else (task, history.read(raw, task.id))
    finally:
        raw.execute("COMMIT")


def _call_with_raw(function: Callable[..., _T], raw: sqlite3.Connection) -> _T:
    return function(raw=raw)


def _script(make: Make[_T], raw: sqlite3.Connection) -> _T:
    """Run the shared script *make* builds (a new one each try) in this transaction."""
    return run_sync(make(), raw.execute)
