"""PostgresTaskStore: the scale-out store that many processes on many machines share."""

import secrets
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from typing import Final, Self

import anyio
import psycopg
from anyio.abc import TaskStatus

from taskloom.engine.children import cancel_for_parent, record_child_end
from taskloom.engine.claims import ClaimAtCreate, WorkflowKey
from taskloom.engine.errors import (
    ConcurrencyError,
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
from taskloom.persistence.postgres import history, notify, rows, runs, schema, tokens, versions
from taskloom.persistence.postgres.driver import Connection, Database, connect, describe, translate
from taskloom.persistence.postgres.notify import OnChange
from taskloom.persistence.postgres.settings import PostgresSettings

_CREATE_TRIES: Final = 5
_LAST_CHARACTER: Final = "\U0010ffff"
_MAX_POSITION: Final = 2**63 - 1


class PostgresTaskStore:
    """Tasks in one PostgreSQL schema, shared by any number of servers and workers.

    Every method is one transaction on a pooled connection; a state change locks the
    task's row, reads it, applies the engine's mutation and writes it (fenced by the
    lease token when a worker writes; ADR 0032). Open it with
    :meth:`open`.
    """

    def __init__(self, settings: PostgresSettings, database: Database) -> None:
        self.settings = settings
        self._db = database

    @property
    def origin(self) -> str:
        """This store's random id: in its notifications and its connections' names."""
        return self._db.origin

    @property
    def name(self) -> str:
        """``user@host:port/dbname``, for messages (never the password)."""
        return self._db.name

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: PostgresSettings | str, *, read_only: bool = False
    ) -> AsyncIterator[Self]:
        """Connect, create and migrate the schema if needed, and close the pool on exit.
        *read_only* (the CLI's read commands) checks the schema instead, changing nothing.

        Raises:
            DatabaseUnavailableError: no server answers, or it refused the connection.
            ForeignDatabaseError: the schema holds another application's tables.
            SchemaVersionError: the schema was written by a newer taskloom (or, read-only,
                is missing or older).
            PersistenceError: a malformed URL, or any other failure to open it.
        """
        if not isinstance(settings, PostgresSettings):
            settings = PostgresSettings(url=settings)
        name = describe(settings.url)
        origin = secrets.token_hex(8)
        connection = await connect(settings, name, origin=origin)
        try:
            prepare = schema.check if read_only else schema.migrate
            await prepare(connection, settings.schema_name, name)
        except psycopg.Error as error:
            raise translate(error, name) from error
        finally:
            with anyio.CancelScope(shield=True):
                await connection.close()
        database = Database(settings, name, origin=origin)
        async with database.opened():
            yield cls(settings, database)

    async def watch_changes(
        self, on_change: OnChange, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Call *on_change* with the id of every task that another process changes, as
        PostgreSQL announces it (``LISTEN``), until cancelled. Start it with
        ``task_group.start``: it reports started once it listens.
        """
        await notify.listen(
            self.settings,
            self._db.name,
            self._db.origin,
            on_change,
            on_reconnect=self._db.outage.answered,
            task_status=task_status,
        )

    def on_back(self, wake_up: Callable[[], None]) -> None:
        """Call *wake_up* whenever the database answers again after an outage."""
        self._db.outage.on_back(wake_up)

    # -- tokens (TokenStore) ----------------------------------------------------------------

    async def record_loaded(
        self, process: str, loaded: Iterable[WorkflowKey], now: datetime, until: datetime
    ) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.record_loaded`."""
        await self._db.transaction(
            partial(versions.record_loaded, process, list(loaded), now, until)
        )

    async def forget_process(self, process: str) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.forget_process`."""
        await self._db.transaction(partial(versions.forget_process, process))

    async def live_versions(self, now: datetime) -> frozenset[WorkflowKey]:
        """See :meth:`taskloom.engine.versions.VersionStore.live_versions`."""
        return await self._db.read(partial(versions.live_versions, now))

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
        return await self._db.read(partial(versions.unfinished_versions, now))

    async def move_run(self, task_id: TaskId, now: datetime, move: RunMove) -> Task:
        """See :meth:`taskloom.engine.versions.VersionStore.move_run`."""
        return await self._db.transaction(partial(_move_run, task_id, now, move))

    async def add_token(self, record: TokenRecord) -> None:
        """See :meth:`taskloom.engine.tokens.TokenStore.add_token`."""
        await self._db.transaction(partial(tokens.add_token, record))

    async def find_token(self, token_id: str) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_token`."""
        return await self._db.read(partial(tokens.find_token, token_id))

    async def list_tokens(self) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.list_tokens`."""
        return await self._db.read(tokens.list_tokens)

    async def find_tokens(self, token_ids: Collection[str]) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_tokens`."""
        return await self._db.read(partial(tokens.find_tokens, list(token_ids)))

    async def revoke_token(self, token_id: str, now: datetime) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.revoke_token`."""
        return await self._db.transaction(partial(tokens.revoke_token, token_id, now))

    async def create(self, task: Task, now: datetime) -> tuple[Task, bool]:
        """See :meth:`taskloom.engine.ports.TaskStore.create`."""
        return await self._db.transaction(partial(_create, task, now))

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        """See :meth:`taskloom.engine.runs.RunStore.create_claimed`."""
        return await self._db.transaction(partial(_create_claimed, task, claim, now))

    async def get(self, task_id: TaskId, now: datetime) -> Task | None:
        """See :meth:`taskloom.engine.ports.TaskStore.get`."""
        return await self._db.read(partial(_get, task_id, now, lock=False))

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """See :meth:`taskloom.engine.ports.TaskStore.history`."""
        return await self._db.read(partial(history.read, task_id, now))

    async def list(self, query: TaskQuery, now: datetime) -> StorePage:
        """See :meth:`taskloom.engine.ports.TaskStore.list`."""
        return await self._db.read(partial(_list, query, now))

    async def count(self, query: TaskQuery, now: datetime) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.count`."""
        return await self._db.read(partial(_count, query, now))

    async def count_by_state(
        self, *, owner: str | None, match_owner: bool, now: datetime, at_most: int | None = None
    ) -> dict[TaskState, int]:
        """See :meth:`taskloom.engine.ports.TaskStore.count_by_state`."""
        return await self._db.read(partial(_count_by_state, owner, match_owner, at_most))

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        """See :meth:`taskloom.engine.ports.TaskStore.update`."""
        return await self._db.transaction(partial(_update, task_id, now, mutate, fence))

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.purge_expired`."""
        return await self._db.transaction(partial(_purge_expired, now, limit))

    async def delete_finished(
        self,
        *,
        limit: int,
        task_ids: Sequence[str] | None = None,
        finished_before: datetime | None = None,
        states: frozenset[TaskState] = TERMINAL_STATES,
    ) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.delete_finished`."""
        wanted = [state.value for state in sorted(states & TERMINAL_STATES)]
        chosen = None if task_ids is None else [str(task_id) for task_id in task_ids]
        return await self._db.transaction(
            partial(_delete_finished, wanted, chosen, finished_before, limit)
        )

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
        return await self._db.transaction(
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
            durable=False,  # a lost claim is claimed again (ADR 0016)
        )

    async def renew_leases(
        self, *, worker: str, now: Instant, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
        return await self._db.transaction(
            partial(runs.renew_leases, worker=worker, now=now, lease_for=lease_for),
            durable=False,
        )

    async def release_lease(self, lease: Lease) -> None:
        """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
        await self._db.transaction(partial(runs.release_lease, lease=lease), durable=False)

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`."""
        return await self._db.transaction(
            partial(runs.start_node, lease=lease, start=start, now=now), durable=False
        )

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node`."""
        return await self._db.transaction(partial(runs.end_node, lease=lease, end=end, now=now))

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        """See :meth:`taskloom.engine.runs.RunStore.finish_run`."""
        return await self._db.transaction(partial(_finish_run, lease, end, now, mutate))

    async def attempts(self, task_id: TaskId) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
        return await self._db.read(partial(runs.attempts, task_id=task_id))

    async def failed_attempts(self, query: FailureQuery, now: datetime) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
        return await self._db.read(partial(runs.failed_attempts, query=query, now=now))

    async def checkpoints(self, task_id: TaskId) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.checkpoints`."""
        return await self._db.read(partial(runs.node_runs, task_id=task_id))

    async def fork_run(
        self, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
    ) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
        return await self._db.transaction(
            partial(runs.fork_run, task=task, source=source, nodes=nodes, now=now)
        )


# -- transactions ------------------------------------------------------------------------


async def _create(
    task: Task, now: datetime, connection: Connection, claimed: ClaimedRun | None = None
) -> tuple[Task, bool]:
    """Insert *task*, or as *claimed* leaves it (eager start), unless its key is held."""
    stored = claimed.task if claimed is not None else task
    if task.idempotency_key is None:
        await connection.execute(rows.INSERT_SQL, rows.insert_row(stored))
        await _created(connection, task, claimed)
        return stored, True
    for _ in range(_CREATE_TRIES):
        inserted = await connection.execute(
            rows.INSERT_SQL + " ON CONFLICT (coalesce(owner, ''), idempotency_key)"
            " WHERE idempotency_key IS NOT NULL DO NOTHING",
            rows.insert_row(stored),
        )
        if inserted.rowcount == 1:
            await _created(connection, task, claimed)
            return stored, True
        cursor = await connection.execute(
            "SELECT position, expires_at, body FROM tasks"
            " WHERE coalesce(owner, '') = %s AND idempotency_key = %s FOR UPDATE",
            (task.owner or "", task.idempotency_key),
        )
        holder = await cursor.fetchone()
        if holder is None:
            continue  # the holder was deleted since: try the insert again
        position, expires_at, body = holder
        if expires_at is None or expires_at > now:
            return rows.task_from_body(body), False
        await connection.execute("DELETE FROM tasks WHERE position = %s", (position,))
    raise ConcurrencyError(
        f"idempotency key {task.idempotency_key!r} kept changing hands; try again"
    )


async def _created(connection: Connection, task: Task, claimed: ClaimedRun | None) -> None:
    """The history of *task*'s creation, and of its claim and its lease with *claimed*."""
    await history.record(connection, None, task)
    if claimed is not None:
        await history.record(connection, task, claimed.task)
        await runs.insert_lease(connection, claimed.lease)


async def _create_claimed(
    task: Task, claim: ClaimAtCreate, now: Instant, connection: Connection
) -> tuple[Task, ClaimedRun | None]:
    claimed = claim.applied(task, at(now))  # in this attempt: a retry never commits a stale lease
    stored, created = await _create(task, task.created_at, connection, claimed)
    return stored, claimed if created else None


async def _get(
    task_id: TaskId, now: datetime, connection: Connection, *, lock: bool
) -> Task | None:
    cursor = await connection.execute(
        f"SELECT body FROM tasks WHERE id = %s AND {rows.LIVE}"
        + (" FOR NO KEY UPDATE" if lock else ""),
        (task_id, now),
    )
    row = await cursor.fetchone()
    return rows.task_from_body(row[0]) if row is not None else None


async def _list(query: TaskQuery, now: datetime, connection: Connection) -> StorePage:
    where, params = await _matching(query, now, connection)
    if query.before is not None:
        where.append("position < %s")
        params.append(query.before)
    params.append(query.limit + 1)
    cursor = await connection.execute(
        f"SELECT position, body FROM tasks WHERE {' AND '.join(where)}"
        " ORDER BY position DESC LIMIT %s",
        params,
    )
    found = await cursor.fetchall()
    page = found[: query.limit]
    tasks = tuple(rows.task_from_body(body) for _, body in page)
    next_before = page[-1][0] if len(found) > query.limit else None
    return StorePage(tasks=tasks, next_before=next_before)


async def _count(query: TaskQuery, now: datetime, connection: Connection) -> int:
    where, params = await _matching(query, now, connection)
    cursor = await connection.execute(
        f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}", params
    )
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def _matching(
    query: TaskQuery, now: datetime, connection: Connection
) -> tuple[list[str], list[object]]:
    """The conditions (and their values) of the live tasks *query* filters for."""
    where = [rows.LIVE]
    params: list[object] = [now]
    if query.match_owner:
        if query.owner is None:
            where.append("owner IS NULL")
        else:
            where.append("owner = %s")
            params.append(query.owner)
    if query.states is not None:
        where.append("state = ANY(%s)")
        params.append(sorted(state.value for state in query.states))
    if query.parent_id is not None:
        where.append("parent_id = %s")
        params.append(query.parent_id)
    if query.names is not None:
        where.append("name = ANY(%s)")
        params.append(sorted(query.names))
    if query.id_prefix is not None:
        where.append("id >= %s AND id < %s")
        params += [query.id_prefix, query.id_prefix + _LAST_CHARACTER]
    if query.idempotency_key is not None:  # the terms of the (owner, key) index
        where.append("coalesce(owner, '') = %s AND idempotency_key = %s")
        params += [query.owner or "", query.idempotency_key]
    for bound, condition in (
        (query.created_after, "position >= %s"),
        (query.created_before, "position < %s"),
    ):
        if bound is not None:
            where.append(condition)
            params.append(await _first_created_at(bound, connection))
    return where, params


async def _first_created_at(moment: datetime, connection: Connection) -> int:
    """The position of the first task created at or after *moment* (past the last one if
    none): positions follow creation order, so a time bound is a position bound."""
    cursor = await connection.execute(
        "SELECT position FROM tasks WHERE created_at >= %s ORDER BY created_at, position LIMIT 1",
        (moment,),
    )
    found = await cursor.fetchone()
    return int(found[0]) if found is not None else _MAX_POSITION


async def _count_by_state(
    owner: str | None, match_owner: bool, at_most: int | None, connection: Connection
) -> dict[TaskState, int]:
    mine, params = "", []
    if match_owner:
        mine = " AND owner IS NULL" if owner is None else " AND owner = %s"
        params = [] if owner is None else [owner]
    if at_most is None:
        condition = mine.removeprefix(" AND ")
        sql = f"SELECT state, count(*) FROM tasks {'WHERE ' if condition else ''}{condition}"
        cursor = await connection.execute(f"{sql} GROUP BY state", params)
        return {TaskState(state): int(count) for state, count in await cursor.fetchall()}
    counts = {}
    for state in TaskState:  # one capped count each, read from the (owner, state) index
        cursor = await connection.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = %s{mine} LIMIT %s) AS capped",
            [state.value, *params, at_most],
        )
        found = await cursor.fetchone()
        if found is not None and found[0]:
            counts[state] = int(found[0])
    return counts


async def _update(
    task_id: TaskId,
    now: datetime,
    mutate: TaskMutation,
    fence: Lease | None,
    connection: Connection,
) -> Task:
    current = await _locked(task_id, now, connection)
    if fence is not None:
        await runs.check_fence(connection, fence)
    return await _write(current, mutate, fence, now, connection)


async def _move_run(task_id: TaskId, now: datetime, move: RunMove, connection: Connection) -> Task:
    current = await _locked(task_id, now, connection)  # a claim's lease waits for this row
    cursor = await connection.execute(
        "SELECT worker FROM leases WHERE task_id = %s AND expires_at > %s", (task_id, now)
    )
    holder = await cursor.fetchone()
    if holder is not None:
        raise TaskStateError(running_now(task_id, holder[0]))
    nodes = await runs.node_runs(connection, task_id)
    moved = await _write(current, lambda task: move(task, nodes), None, now, connection)
    await connection.execute(
        "UPDATE tasks SET workflow_version = %s WHERE id = %s", (moved.workflow_version, task_id)
    )
    return moved


async def _finish_run(
    lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation, connection: Connection
) -> tuple[NodeRun, Task]:
    current = await _locked(lease.task_id, now, connection)  # the task row before the lease's
    run = await runs.end_node(connection, lease, end, now)  # checks the fence
    return run, await _write(current, mutate, lease, now, connection)


async def _locked(task_id: TaskId, now: datetime, connection: Connection) -> Task:
    current = await _get(task_id, now, connection, lock=True)  # writers of a task queue here
    if current is None:
        raise TaskNotFoundError(task_id)
    return current


async def _write(
    current: Task,
    mutate: TaskMutation,
    fence: Lease | None,
    now: datetime,
    connection: Connection,
) -> Task:
    """Store ``mutate(current)``. *current* was read in this transaction with the row
    locked (``FOR NO KEY UPDATE``): every other writer of the task waits for this
    transaction to end and then reads what it wrote (ADR 0032)."""
    new = mutate(current)
    ensure_successor(current, new)
    await connection.execute(rows.UPDATE_SQL, rows.update_row(new))
    await history.record(connection, current, new)
    if fence is not None and new.is_terminal:
        # The run ends with its result: a worker killed before it released the lease
        # must not leave the row behind (claims never look at ended tasks again), nor
        # attempts open that no worker will end.
        await runs.end_run(connection, fence, now)
    elif fence is not None and new.parked:  # the run waits: no worker holds it (ADR 0021)
        await runs.release_lease(connection, fence)
    if new.is_terminal and not current.is_terminal:
        await _relatives_of_ended(new, now, connection)
    return new


async def _delete_finished(
    states: list[str],
    task_ids: list[str] | None,
    finished_before: datetime | None,
    limit: int,
    connection: Connection,
) -> int:
    deleted = await connection.execute(
        "DELETE FROM tasks WHERE position IN (SELECT position FROM tasks"
        " WHERE state = ANY(%(states)s)"
        " AND (%(ids)s::text[] IS NULL OR id = ANY(%(ids)s::text[]))"
        " AND (%(before)s::timestamptz IS NULL OR updated_at < %(before)s::timestamptz)"
        " ORDER BY position LIMIT %(limit)s FOR UPDATE SKIP LOCKED)",
        {"states": states, "ids": task_ids, "before": finished_before, "limit": limit},
    )
    return deleted.rowcount


async def _relatives_of_ended(task: Task, now: datetime, connection: Connection) -> None:
    """Record *task*'s end on its parent and cancel its children that have not ended,
    in the transaction that ends it (ADR 0026); each such cancel recurses. Rows are
    locked parent before child here and child before parent by a child's end: a deadlock
    between the two is broken by PostgreSQL and the loser retried (a transient error)."""
    if task.parent_id is not None:
        parent = await _get(task.parent_id, now, connection, lock=True)
        recorded = record_child_end(parent, task, now) if parent is not None else None
        if parent is not None and recorded is not None:
            await _write(parent, lambda _: recorded, None, now, connection)
    cursor = await connection.execute(
        f"SELECT body FROM tasks WHERE parent_id = %s AND {rows.LIVE}"
        " AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR NO KEY UPDATE",
        (task.id, now),
    )
    for (body,) in await cursor.fetchall():
        child = rows.task_from_body(body)
        await _write(child, partial(cancel_for_parent, parent=task, now=now), None, now, connection)


async def _purge_expired(now: datetime, limit: int, connection: Connection) -> int:
    deleted = await connection.execute(
        "DELETE FROM tasks WHERE position IN (SELECT position FROM tasks"
        " WHERE expires_at <= %s ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)",
        (now, limit),
    )
    return deleted.rowcount
