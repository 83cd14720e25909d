"""SqliteTaskStore: the embedded default store (WAL, group commit, ``synchronous=FULL``)."""

import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Final, Self, TypeVar

import aiosqlite
import anyio

from taskloom.engine.children import cancel_for_parent, record_child_end
from taskloom.engine.claims import ClaimAtCreate, WorkflowKey
from taskloom.engine.errors import (
    PersistenceError,
    SchemaVersionError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.history import HistoryEntry
from taskloom.engine.models import (
    StorePage,
    Task,
    TaskId,
    TaskMutation,
    TaskQuery,
    ensure_successor,
)
from taskloom.engine.runs import (
    ClaimedRun,
    FailureQuery,
    Instant,
    Lease,
    NodeAttempt,
    NodeEnd,
    NodeRun,
    NodeStart,
    at,
)
from taskloom.engine.states import TERMINAL_STATES, TaskState
from taskloom.engine.tokens import TokenRecord
from taskloom.engine.versions import RunMove, StoredVersion, running_now
from taskloom.persistence.outage import Outage
from taskloom.persistence.sqlite import history, rows, runs, schema, tokens, versions
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
from taskloom.persistence.sqlite.writer import BOOKKEEPING_LEVEL, GroupCommitWriter

_T = TypeVar("_T")
_LAST_CHARACTER: Final = "\U0010ffff"
_MAX_POSITION = 2**63 - 1


class SqliteTaskStore:
    """Tasks in one SQLite file, shared safely by several processes.

    Writes go through one group-committing writer connection; reads use a second
    connection, so they never wait behind an fsync. Open it with :meth:`open`.
    """

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

    async def create(self, task: Task, now: datetime) -> tuple[Task, bool]:
        """See :meth:`taskloom.engine.ports.TaskStore.create`."""
        return await self.writer.submit(partial(_create, task, rows.micros(now)))

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        """See :meth:`taskloom.engine.runs.RunStore.create_claimed` (durable: fsynced)."""
        return await self.writer.submit(partial(_create_claimed, task, claim, now))

    async def get(self, task_id: TaskId, now: datetime) -> Task | None:
        """See :meth:`taskloom.engine.ports.TaskStore.get`."""
        return await self._read_point(partial(_get, task_id, rows.micros(now)))

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """See :meth:`taskloom.engine.ports.TaskStore.history`."""
        return await self._read(partial(_history, task_id, rows.micros(now)))

    async def list(self, query: TaskQuery, now: datetime) -> StorePage:
        """See :meth:`taskloom.engine.ports.TaskStore.list`."""
        return await self._read(partial(_list, query, rows.micros(now)))

    async def count(self, query: TaskQuery, now: datetime) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.count`."""
        return await self._read(partial(_count, query, rows.micros(now)))

    async def count_by_state(
        self, *, owner: str | None, match_owner: bool, now: datetime, at_most: int | None = None
    ) -> dict[TaskState, int]:
        """See :meth:`taskloom.engine.ports.TaskStore.count_by_state`."""
        return await self._read(partial(_count_by_state, owner, match_owner, at_most))

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        """See :meth:`taskloom.engine.ports.TaskStore.update`."""
        return await self.writer.submit(partial(_update, task_id, rows.micros(now), mutate, fence))

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.purge_expired`."""
        return await self.writer.submit(partial(_purge_expired, rows.micros(now), limit))

    async def delete_finished(
        self,
        *,
        limit: int,
        task_ids: Sequence[str] | None = None,
        finished_before: datetime | None = None,
        states: frozenset[TaskState] = TERMINAL_STATES,
    ) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.delete_finished`."""
        conditions = [f"state IN ({', '.join('?' * len(states & TERMINAL_STATES)) or 'NULL'})"]
        values: list[object] = [state.value for state in sorted(states & TERMINAL_STATES)]
        if task_ids is not None:
            conditions.append(f"id IN ({', '.join('?' * len(task_ids)) or 'NULL'})")
            values += list(task_ids)
        if finished_before is not None:
            conditions.append("updated_at < ?")
            values.append(rows.micros(finished_before))
        sql = (
            "DELETE FROM tasks WHERE seq IN (SELECT seq FROM tasks WHERE "
            f"{' AND '.join(conditions)} ORDER BY seq LIMIT ?)"
        )
        return await self.writer.submit(partial(_delete, sql, (*values, limit)))

    # -- runs (RunStore) ------------------------------------------------------------------

    async def claim_runs(
        self,
        *,
        worker: str,
        workflows: frozenset[str | tuple[str, str]],
        now: Instant,
        lease_for: timedelta,
        limit: int,
        start: TaskMutation,
        reclaim_from: str | None = None,
        per_owner: int | None = None,
    ) -> Sequence[ClaimedRun]:
        """See :meth:`taskloom.engine.runs.RunStore.claim_runs`."""
        return await self.writer.submit(
            partial(
                _call_with_raw,
                partial(
                    runs.claim_runs,
                    worker=worker,
                    workflows=workflows,
                    now=now,
                    lease_for=lease_for,
                    limit=limit,
                    start=start,
                    reclaim_from=reclaim_from,
                    per_owner=per_owner,
                ),
            ),
            durable=False,  # a lost claim is claimed again
        )

    async def renew_leases(
        self, *, worker: str, now: Instant, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
        return await self.writer.submit(
            partial(
                _call_with_raw,
                partial(runs.renew_leases, worker=worker, now=now, lease_for=lease_for),
            ),
            durable=False,  # a lost renewal only shortens a lease
        )

    async def release_lease(self, lease: Lease) -> None:
        """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
        await self.writer.submit(
            partial(_call_with_raw, partial(runs.release_lease, lease=lease)),
            durable=False,  # a lease that comes back expires
        )

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`."""
        return await self.writer.submit(
            partial(_call_with_raw, partial(runs.start_node, lease=lease, start=start, now=now)),
            durable=False,  # survives a crash of the process; power loss re-runs the node
        )

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node`."""
        return await self.writer.submit(
            partial(_call_with_raw, partial(runs.end_node, lease=lease, end=end, now=now))
        )

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        """See :meth:`taskloom.engine.runs.RunStore.finish_run`."""
        return await self.writer.submit(partial(_finish_run, lease, end, now, mutate))

    async def attempts(self, task_id: TaskId) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
        return await self._read(partial(_call_with_raw, partial(runs.attempts, task_id=task_id)))

    async def failed_attempts(self, query: FailureQuery, now: datetime) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
        failed = partial(runs.failed_attempts, query=query, now=rows.micros(now))
        return await self._read(partial(_call_with_raw, failed))

    async def checkpoints(self, task_id: TaskId) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.checkpoints`."""
        return await self._read(partial(_call_with_raw, partial(runs.node_runs, task_id=task_id)))

    async def fork_run(
        self, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
    ) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
        return await self.writer.submit(
            partial(
                _call_with_raw,
                partial(runs.fork_run, task=task, source=source, nodes=nodes, now=now),
            )
        )

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

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
        return await self._read(partial(versions.unfinished_versions, now=now))

    async def move_run(self, task_id: TaskId, now: datetime, move: RunMove) -> Task:
        """See :meth:`taskloom.engine.versions.VersionStore.move_run`."""
        return await self.writer.submit(partial(_move_run, task_id, now, move))

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

    async def _read_point(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run a primary-key lookup on the event loop's own thread: it costs less than
        the two thread hops of :meth:`_read`. A reader in WAL mode does not wait for
        writers; should the file be locked all the same (a WAL recovery under way), the
        read goes to the reader thread, which waits and retries. On a read-only store,
        reads are all there is to say that the database is back (see :meth:`_read`)."""
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


def _create(
    task: Task, now: int, raw: sqlite3.Connection, claimed: ClaimedRun | None = None
) -> tuple[Task, bool]:
    """Insert *task*, or as *claimed* leaves it (eager start), unless its key is held."""
    if task.idempotency_key is not None:
        holder = raw.execute(
            "SELECT seq, expires_at, body FROM tasks"
            " WHERE coalesce(owner, '') = ? AND idempotency_key = ?",
            (task.owner or "", task.idempotency_key),
        ).fetchone()
        if holder is not None:
            seq, expires_at, body = holder
            if expires_at is None or expires_at > now:
                return rows.task_from_body(body), False
            raw.execute("DELETE FROM tasks WHERE seq = ?", (seq,))  # expired: frees the key
    stored = claimed.task if claimed is not None else task
    raw.execute(rows.INSERT_SQL, rows.insert_row(stored))
    history.record(raw, None, task)
    if claimed is not None:
        history.record(raw, task, stored)
        runs.insert_lease(raw, claimed.lease)
    return stored, True


def _create_claimed(
    task: Task, claim: ClaimAtCreate, now: Instant, raw: sqlite3.Connection
) -> tuple[Task, ClaimedRun | None]:
    moment = at(now)  # in the writer's transaction: the time the claim commits at
    claimed = claim.applied(task, moment)
    stored, created = _create(task, rows.micros(task.created_at), raw, claimed)
    return stored, claimed if created else None


def _get(task_id: TaskId, now: int, raw: sqlite3.Connection) -> Task | None:
    row = raw.execute(
        f"SELECT body FROM tasks WHERE id = ? AND {rows.LIVE}", (task_id, now)
    ).fetchone()
    return rows.task_from_body(row[0]) if row is not None else None


def _history(
    task_id: TaskId, now: int, raw: sqlite3.Connection
) -> tuple[Task, Sequence[HistoryEntry]] | None:
    raw.execute("BEGIN")  # one snapshot for the task and its rows
    try:
        task = _get(task_id, now, raw)
        return None if task is None else (task, history.read(raw, task.id))
    finally:
        raw.execute("COMMIT")


def _list(query: TaskQuery, now: int, raw: sqlite3.Connection) -> StorePage:
    where, params = _matching(query, now, raw)
    where.insert(0, "seq < ?")
    params.insert(0, query.before if query.before is not None else _MAX_POSITION)
    params.append(query.limit + 1)
    found = raw.execute(
        f"SELECT seq, body FROM tasks WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
        params,
    ).fetchall()
    page = found[: query.limit]
    tasks = tuple(rows.task_from_body(body) for _, body in page)
    next_before = page[-1][0] if len(found) > query.limit else None
    return StorePage(tasks=tasks, next_before=next_before)


def _count(query: TaskQuery, now: int, raw: sqlite3.Connection) -> int:
    where, params = _matching(query, now, raw)
    found = raw.execute(f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}", params)
    return int(found.fetchone()[0])


def _matching(
    query: TaskQuery, now: int, raw: sqlite3.Connection
) -> tuple[list[str], list[object]]:
    """The conditions (and their values) of the live tasks *query* filters for."""
    where = [rows.LIVE]
    params: list[object] = [now]
    if query.match_owner:
        if query.owner is None:
            where.append("owner IS NULL")
        else:
            where.append("owner = ?")
            params.append(query.owner)
    if query.states is not None:
        states = sorted(state.value for state in query.states)
        where.append(f"state IN ({', '.join('?' * len(states))})")
        params.extend(states)
    if query.parent_id is not None:
        where.append("parent_id = ?")
        params.append(query.parent_id)
    if query.names is not None:
        names = sorted(query.names)
        where.append(f"name IN ({', '.join('?' * len(names))})")
        params.extend(names)
    if query.id_prefix is not None:
        where.append("id >= ? AND id < ?")
        params += [query.id_prefix, query.id_prefix + _LAST_CHARACTER]
    if query.idempotency_key is not None:  # the terms of the (owner, key) index
        where.append("coalesce(owner, '') = ? AND idempotency_key = ?")
        params += [query.owner or "", query.idempotency_key]
    for bound, condition in ((query.created_after, "seq >= ?"), (query.created_before, "seq < ?")):
        if bound is not None:
            where.append(condition)
            params.append(_first_created_at(bound, raw))
    return where, params


def _first_created_at(moment: datetime, raw: sqlite3.Connection) -> int:
    """The position of the first task created at or after *moment* (past the last one if
    none): positions follow creation order, so a time bound is a position bound."""
    found = raw.execute(
        "SELECT seq FROM tasks WHERE created_us >= ? ORDER BY created_us, seq LIMIT 1",
        (rows.micros(moment),),
    ).fetchone()
    return int(found[0]) if found is not None else _MAX_POSITION


def _count_by_state(
    owner: str | None, match_owner: bool, at_most: int | None, raw: sqlite3.Connection
) -> dict[TaskState, int]:
    mine, params = "", []
    if match_owner:
        mine = " AND owner IS NULL" if owner is None else " AND owner = ?"
        params = [] if owner is None else [owner]
    if at_most is None:
        condition = mine.removeprefix(" AND ")
        sql = f"SELECT state, count(*) FROM tasks {'WHERE ' if condition else ''}{condition}"
        found = raw.execute(f"{sql} GROUP BY state", params).fetchall()
        return {TaskState(state): int(count) for state, count in found}
    counts = {}
    for state in TaskState:  # one capped count each, read from the (owner, state) index
        (count,) = raw.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = ?{mine} LIMIT ?)",
            [state.value, *params, at_most],
        ).fetchone()
        if count:
            counts[state] = int(count)
    return counts


def _call_with_raw(function: Callable[..., _T], raw: sqlite3.Connection) -> _T:
    return function(raw=raw)


def _update(
    task_id: TaskId, now: int, mutate: TaskMutation, fence: Lease | None, raw: sqlite3.Connection
) -> Task:
    current = _current(task_id, now, raw)
    if fence is not None:
        runs.check_fence(raw, fence)
    return _write(current, mutate, fence, now, raw)


def _move_run(task_id: TaskId, now: datetime, move: RunMove, raw: sqlite3.Connection) -> Task:
    now_us = rows.micros(now)
    current = _current(task_id, now_us, raw)
    holder = raw.execute(
        "SELECT worker FROM leases WHERE task_id = ? AND expires_at > ?", (task_id, now_us)
    ).fetchone()
    if holder is not None:
        raise TaskStateError(running_now(task_id, holder[0]))
    nodes = runs.node_runs(raw, task_id)
    moved = _write(current, lambda task: move(task, nodes), None, now_us, raw)
    raw.execute(
        "UPDATE tasks SET workflow_version = ? WHERE id = ?", (moved.workflow_version, task_id)
    )
    return moved


def _finish_run(
    lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation, raw: sqlite3.Connection
) -> tuple[NodeRun, Task]:
    # One write, so one savepoint: a refusal of either part undoes both.
    current = _current(lease.task_id, rows.micros(now), raw)
    run = runs.end_node(raw, lease, end, now)  # checks the fence
    return run, _write(current, mutate, lease, rows.micros(now), raw)


def _current(task_id: TaskId, now: int, raw: sqlite3.Connection) -> Task:
    current = _get(task_id, now, raw)
    if current is None:
        raise TaskNotFoundError(task_id)
    return current


def _write(
    current: Task, mutate: TaskMutation, fence: Lease | None, now: int, raw: sqlite3.Connection
) -> Task:
    """Store ``mutate(current)``. *current* was read in this transaction, which holds the
    database's write lock (``BEGIN IMMEDIATE``): no other write can come between the read
    and this one, in this process or another (ADR 0032)."""
    new = mutate(current)
    ensure_successor(current, new)
    raw.execute(rows.UPDATE_SQL, rows.update_row(new))
    history.record(raw, current, new)
    if fence is not None and new.is_terminal:
        # The run ends with its result: a worker killed before it released the lease
        # must not leave the row behind (claims never look at ended tasks again), nor
        # attempts open that no worker will end.
        runs.release_lease(raw, fence)
        runs.close_abandoned(raw, current.id, now)
    elif fence is not None and new.parked:  # the run waits: no worker holds it (ADR 0021)
        runs.release_lease(raw, fence)
    if new.is_terminal and not current.is_terminal:
        _relatives_of_ended(new, now, raw)
    return new


def _delete(sql: str, values: tuple[object, ...], raw: sqlite3.Connection) -> int:
    return raw.execute(sql, values).rowcount


def _relatives_of_ended(task: Task, now: int, raw: sqlite3.Connection) -> None:
    """Record *task*'s end on its parent and cancel its children that have not ended,
    in the transaction that ends it (ADR 0026); each such cancel recurses."""
    moment = rows.from_micros(now)
    if task.parent_id is not None:
        parent = _get(task.parent_id, now, raw)
        recorded = record_child_end(parent, task, moment) if parent is not None else None
        if parent is not None and recorded is not None:
            _write(parent, lambda _: recorded, None, now, raw)
    found = raw.execute(
        f"SELECT body FROM tasks WHERE parent_id = ? AND {rows.LIVE}"
        " AND state NOT IN ('completed', 'failed', 'cancelled')",
        (task.id, now),
    ).fetchall()
    for (body,) in found:
        child = rows.task_from_body(body)
        _write(child, partial(cancel_for_parent, parent=task, now=moment), None, now, raw)


def _purge_expired(now: int, limit: int, raw: sqlite3.Connection) -> int:
    return raw.execute(
        "DELETE FROM tasks WHERE seq IN"
        " (SELECT seq FROM tasks WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        (now, limit),
    ).rowcount
