"""PostgresTaskStore: the scale-out store that many processes on many machines share."""

import secrets
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any, Final, Self, TypeVar, Unpack

import anyio
import psycopg
from anyio.abc import TaskStatus

from taskloom.engine import cascade
from taskloom.engine.claims import WorkflowKey
from taskloom.engine.errors import (
    ConcurrencyError,
    OutcomeUnknownError,
    PersistenceError,
    StoreUnavailableError,
)
from taskloom.engine.history import HistoryEntry
from taskloom.engine.models import Task, TaskId, TaskMutation
from taskloom.engine.runs import ClaimedRun, ClaimTerms, Lease, NodeEnd, NodeRun, NodeStart
from taskloom.engine.tokens import TokenRecord
from taskloom.engine.versions import StoredVersion
from taskloom.persistence.postgres import (
    creates,
    finishes,
    history,
    nodes,
    notify,
    rows,
    schema,
    takes,
    tokens,
    updates,
    versions,
)
from taskloom.persistence.postgres.batches import Batches, Outcome
from taskloom.persistence.postgres.driver import (
    Connection,
    Database,
    Work,
    connect,
    describe,
    translate,
)
from taskloom.persistence.postgres.notify import OnChange
from taskloom.persistence.postgres.settings import PostgresSettings
from taskloom.persistence.sql import history as sql_history
from taskloom.persistence.sql import leases, tasks
from taskloom.persistence.sql.dialect import POSTGRES
from taskloom.persistence.sql.script import (
    Script,
    Statement,
    ask,
    run_async,
)
from taskloom.persistence.sql.store import Make, SqlStore

_T = TypeVar("_T")
_CREATE_TRIES: Final = 5


class PostgresTaskStore(SqlStore):
    """Tasks in one PostgreSQL schema, shared by any number of servers and workers.

    Every method is one transaction on a pooled connection; a state change locks the
    task's row, reads it, applies the engine's mutation and writes it (fenced by the
    lease token when a worker writes; ADR 0032). Node starts, and node ends, that wait
    at one moment go as one statement each (ADR 0052); so do a worker's fenced updates
    (its progress writes: a read and a statement), runs' final writes (one transaction)
    and the runs one claim takes (ADR 0055). Open it with :meth:`open`. The store rules
    are :class:`taskloom.persistence.sql.store.SqlStore`'s.
    """

    dialect = POSTGRES

    def __init__(self, settings: PostgresSettings, database: Database) -> None:
        self.settings = settings
        self._db = database
        self._starts = Batches[nodes.StartPayload](self._send_starts, _node_key)
        self._ends = Batches[nodes.EndPayload](self._send_ends, _node_key)
        self._updates = Batches[updates.Payload](self._send_updates, _task_key)
        self._finishes = Batches[finishes.Payload](self._send_finishes, _finish_key)

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
        raised: BaseException | None = None
        async with database.opened(), anyio.create_task_group() as senders:
            store = cls(settings, database)
            await senders.start(store._starts.run)
            await senders.start(store._ends.run)
            await senders.start(store._updates.run)
            await senders.start(store._finishes.run)
            try:
                yield store
            except BaseException as error:  # noqa: BLE001  # raised below, as it was
                raised = error  # (not wrapped in the senders' task group's group)
            finally:
                store._starts.close()
                store._ends.close()
                store._updates.close()
                store._finishes.close()
        if raised is not None:
            raise raised

    async def watch_changes(
        self,
        on_change: OnChange,
        *,
        work_only: bool = False,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call *on_change* with the id and new state of every task that another process
        changes, as PostgreSQL announces it (``LISTEN``), until cancelled; with
        *work_only*, only the changes a worker acts on (ADR 0062). Start it with
        ``task_group.start``: it reports started once it listens.
        """
        await notify.listen(
            self.settings,
            self._db.name,
            self._db.origin,
            on_change,
            channel=notify.WORK_CHANNEL if work_only else notify.CHANNEL,
            on_reconnect=self._db.outage.answered,
            task_status=task_status,
        )

    async def _transact(self, make: Make[_T], *, durable: bool = True) -> _T:
        return await self._db.transaction(_script(make), durable=durable)

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`: with the starts waiting
        beside it, one statement committed as it ends, durably (ADR 0050, 0052)."""
        started: NodeRun = await self._starts.submit((lease, start, now))
        return started

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node`: with the ends waiting beside
        it, one statement committed durably before any of their callers goes on."""
        ended: NodeRun = await self._ends.submit((lease, end, now))
        return ended

    async def _send_starts(self, payloads: Sequence[nodes.StartPayload]) -> list[Outcome]:
        found = await self._db.alone(partial(_rows, nodes.starts(payloads)))
        return nodes.started(payloads, found)

    async def _send_ends(self, payloads: Sequence[nodes.EndPayload]) -> list[Outcome]:
        found = await self._db.alone(partial(_rows, nodes.ends(payloads)))
        return nodes.ended(payloads, found)

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        """See :meth:`taskloom.engine.ports.TaskStore.update`: a worker's (fenced) update
        goes with the fenced updates waiting beside it, as one statement committed durably
        before any of their callers goes on (ADR 0055); another, alone."""
        if fence is None:
            return await super().update(task_id, now, mutate)
        updated: Task = await self._updates.submit((task_id, now, mutate, fence))
        return updated

    async def _send_updates(self, payloads: Sequence[updates.Payload]) -> list[Outcome]:
        """One read, one write statement for the plain ones; the others alone after it."""
        found = await self._db.read(partial(_rows, updates.read(payloads)))
        made = updates.mutated(payloads, found)
        plain = [(i, each) for i, each in enumerate(made) if isinstance(each, cascade.Put)]
        answers: list[Outcome | None] = [
            (False, each) if isinstance(each, Exception) else None for each in made
        ]
        if plain:
            sent = [payloads[i] for i, _ in plain]
            puts = [put for _, put in plain]
            statement = updates.writes(sent, puts)
            got = updates.written(sent, puts, await self._db.alone(partial(_rows, statement)))
            for (i, _), answer in zip(plain, got, strict=True):
                answers[i] = answer
        return [
            answer if answer is not None else await self._update_alone(payload)
            for payload, answer in zip(payloads, answers, strict=True)
        ]

    async def _update_alone(self, payload: updates.Payload) -> Outcome:
        """*payload* written as a lone update: a locked transaction (its own outcome)."""
        task_id, now, mutate, fence = payload
        try:
            return True, await super().update(task_id, now, mutate, fence)
        except Exception as error:  # noqa: BLE001  # this caller's answer
            return False, error

    async def claim_runs(self, **terms: Unpack[ClaimTerms]) -> Sequence[ClaimedRun]:
        """See :meth:`taskloom.engine.runs.RunStore.claim_runs`: the runs taken with one
        statement, their checkpoints read with one more (ADR 0055)."""
        claim = partial(leases.claim_runs, POSTGRES, terms, takes.take_all)
        # a lost claim is claimed again; the takes' plan is made once (ADR 0063)
        return await self._db.transaction(_script(claim), durable=False, generic_plans=True)

    async def release_lease(self, lease: Lease) -> None:
        """See :meth:`taskloom.engine.runs.RunStore.release_lease`: a run handed back is
        announced too (``notify.release_statement``), so another worker takes it at once
        rather than at its next poll (ADR 0066)."""
        released = notify.release_statement(lease, self.settings.schema_name)
        await self._db.transaction(partial(_rows, released), durable=False)  # it expires

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        """See :meth:`taskloom.engine.runs.RunStore.finish_run`: with the final writes
        waiting beside it, one transaction committed durably before any of their callers
        goes on (ADR 0055)."""
        finished: tuple[NodeRun, Task] = await self._finishes.submit((lease, end, now, mutate))
        return finished

    async def _send_finishes(self, payloads: Sequence[finishes.Payload]) -> list[Outcome]:
        """One alone as before; more as one transaction, then those it left, alone."""
        if len(payloads) == 1:
            return [await self._finish_alone(payloads[0])]
        answers = await self._db.transaction(partial(_finish_all, payloads), generic_plans=True)
        return [
            answer if answer is not None else await self._finish_alone(payload)
            for payload, answer in zip(payloads, answers, strict=True)
        ]

    async def _finish_alone(self, payload: finishes.Payload) -> Outcome:
        """*payload* as a lone final write: its own transaction (its own outcome)."""
        try:
            return True, await super().finish_run(*payload)
        except Exception as error:  # noqa: BLE001  # this caller's answer
            return False, error

    async def _query(self, make: Make[_T], *, point: bool = False) -> _T:
        return await self._db.read(_script(make))

    def on_back(self, wake_up: Callable[[], None]) -> None:
        """Call *wake_up* whenever the database answers again after an outage."""
        self._db.outage.on_back(wake_up)

    # -- versions and tokens (VersionStore, TokenStore) ------------------------------------

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

    async def first_live_process(self, now: datetime) -> str | None:
        """See :meth:`taskloom.engine.versions.VersionStore.first_live_process`."""
        return await self._db.read(partial(versions.first_live_process, now))

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
        return await self._db.read(partial(versions.unfinished_versions, now))

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
        """See :meth:`taskloom.engine.ports.TaskStore.create`: without an idempotency key,
        one statement committed as it ends, durably (:mod:`.creates`); with one, the
        transaction of :meth:`_create`."""
        if task.idempotency_key is not None:
            return await super().create(task, now)
        started = time.monotonic()
        try:
            if await self._db.alone(partial(_rows, creates.create(task))):
                return task, True
        except OutcomeUnknownError as unknown:
            await self._settle_create(task, now, unknown, within=started)
            return task, True
        raise self._taken(task)  # before this create began: not a lost answer of its own

    def _taken(self, task: Task) -> PersistenceError:
        """The refusal of *task*, whose id another task holds (nothing was written)."""
        return PersistenceError(f"PostgreSQL {self._db.name}: task id {task.id} is another task's")

    async def _settle_create(
        self, task: Task, now: datetime, unknown: OutcomeUnknownError, *, within: float
    ) -> None:
        """Find out whether the create of *task* landed, its outcome *unknown*: the same
        rows sent again, written only if its id is not stored, or else the row under its
        id read back, which must be *task*'s. Sent again after another unknown outcome
        until ``store_wait_s`` from *within* (monotonic) has passed.

        Raises:
            OutcomeUnknownError: *unknown*, the store unreachable meanwhile.
            PersistenceError: another task holds the id (nothing was written).
        """
        deadline = within + self.settings.store_wait_s
        pause_s = 0.01
        while True:
            try:
                if await self._db.alone(partial(_rows, creates.create(task))):
                    return  # it had not landed: now it has
                stored = await self.get(task.id, now)
                break
            except OutcomeUnknownError as again:
                if time.monotonic() >= deadline:
                    raise unknown from again
            except StoreUnavailableError as error:
                raise unknown from error
            await anyio.sleep(pause_s)
            pause_s = min(1.0, 2 * pause_s)
        if stored is None or not creates.is_ours(stored, task):
            raise self._taken(task)

    def _create(
        self, task: Task, now: datetime, row: Task | None = None
    ) -> Script[tuple[Task, bool]]:
        """See :meth:`SqlStore._create`: an insert that leaves a held key alone, then a
        look at the holder (locked), deleted if expired and the insert tried again."""
        stored = task if row is None else row
        if task.idempotency_key is None:
            yield Statement(rows.INSERT_SQL, rows.insert_row(stored))
            yield from sql_history.record(POSTGRES, None, task)
            return stored, True
        for _ in range(_CREATE_TRIES):
            inserted = yield from ask(
                Statement(
                    rows.INSERT_SQL + " ON CONFLICT (coalesce(owner, ''), idempotency_key)"
                    " WHERE idempotency_key IS NOT NULL DO NOTHING",
                    rows.insert_row(stored),
                )
            )
            if inserted.rowcount == 1:
                yield from sql_history.record(POSTGRES, None, task)
                return task, True
            holder = yield from tasks.key_holder(POSTGRES, task, now)
            if holder is not None:
                return holder, False
            # gone since the insert, or expired and deleted: try the insert again
        raise ConcurrencyError(
            f"idempotency key {task.idempotency_key!r} kept changing hands; try again"
        )

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """See :meth:`taskloom.engine.ports.TaskStore.history`."""
        return await self._db.read(partial(history.read, task_id, now))


# -- transactions ------------------------------------------------------------------------


def _script(make: Make[_T]) -> Work[_T]:
    """Work that runs the shared script *make* builds (a new one each try)."""

    async def work(connection: Connection) -> _T:
        return await run_async(make(), connection.execute)

    return work


async def _rows(statement: Statement, connection: Connection) -> list[tuple[Any, ...]]:
    """The rows *statement* returns: one statement, one round trip."""
    cursor = await connection.execute(statement.text, statement.parameters)
    return await cursor.fetchall()


async def _finish_all(
    payloads: Sequence[finishes.Payload], connection: Connection
) -> list[Outcome | None]:
    """The work of a batch of final writes: the answer of each, or ``None`` for those to
    write alone (:mod:`.finishes`)."""
    made = finishes.plain_ends(payloads, await _rows(finishes.held(payloads), connection))
    answers: list[Outcome | None] = [
        (False, each) if isinstance(each, Exception) else None for each in made
    ]
    plain = [(i, each) for i, each in enumerate(made) if isinstance(each, cascade.Put)]
    if not plain:
        return answers
    sent = [payloads[i] for i, _ in plain]
    found = await _rows(finishes.node_ends(sent), connection)
    landed: list[tuple[finishes.Payload, cascade.Put]] = []
    for (i, put), payload, (wrote, value) in zip(
        plain, sent, finishes.ended(sent, found), strict=True
    ):
        answers[i] = (True, (value, put.after)) if wrote else (False, value)
        if wrote:
            landed.append((payload, put))
    if landed:
        statement = finishes.run_ends([p for p, _ in landed], [put for _, put in landed])
        await connection.execute(statement.text, statement.parameters)
    return answers


def _finish_key(payload: finishes.Payload) -> str:
    """One final write of a run per transaction (the second would find the run ended)."""
    return payload[0].task_id


def _task_key(payload: updates.Payload) -> str:
    """Two updates of one task are never in one statement (each saw the task before)."""
    return payload[0]


def _node_key(payload: tuple[Lease, NodeStart | NodeEnd, object]) -> tuple[str, str]:
    """Two writes of one node of one run are never in one statement (an upsert may not
    touch a row twice)."""
    lease, write, _ = payload
    return lease.task_id, write.node
