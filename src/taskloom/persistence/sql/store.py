"""SqlStore: every port method the two SQL stores share, written once (ADR 0043).

A dialect's store gives two things, how a script runs in a write transaction and how in
a read (:meth:`SqlStore._transact`, :meth:`SqlStore._query`), and the methods only it
has: opening, the script of ``create`` (:meth:`SqlStore._create`), ``history``, the
version and token tables.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import ClassVar, TypeVar, Unpack

from taskloom.engine.claims import ClaimAtCreate
from taskloom.engine.models import StorePage, Task, TaskId, TaskMutation, TaskQuery
from taskloom.engine.ports import Finished
from taskloom.engine.runs import (
    ClaimedRun,
    ClaimTerms,
    FailureQuery,
    Instant,
    Lease,
    NodeAttempt,
    NodeEnd,
    NodeRun,
    NodeStart,
)
from taskloom.engine.states import TaskState
from taskloom.engine.versions import RunMove
from taskloom.persistence.sql import leases, listing, runs, tasks
from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Script

_T = TypeVar("_T")
Make = Callable[[], Script[_T]]
"""Builds a script afresh (a transaction retried runs a new one)."""


class SqlStore(ABC):
    """The shared half of :class:`taskloom.engine.ports.TaskStore` and
    :class:`taskloom.engine.runs.RunStore` for an SQL database."""

    dialect: ClassVar[Dialect]

    @abstractmethod
    async def _transact(self, make: Make[_T], *, durable: bool = True) -> _T:
        """Run the script *make* builds in one write transaction, committed on return.
        ``durable=False``: bookkeeping, committed without waiting for its own flush."""

    @abstractmethod
    async def _query(self, make: Make[_T], *, point: bool = False) -> _T:
        """Run the read script *make* builds (*point*: a primary-key lookup)."""

    @abstractmethod
    def _create(
        self, task: Task, now: datetime, row: Task | None = None
    ) -> Script[tuple[Task, bool]]:
        """The script of :meth:`create`, the dialect's own (ADR 0043): *task* inserted
        (as *row*, the task a claim at its create leaves, when given) with the history
        row of its creation; or the live task of its owner holding its idempotency key
        and ``False``, writing nothing."""

    # -- tasks (TaskStore) ----------------------------------------------------------------

    async def create(self, task: Task, now: datetime) -> tuple[Task, bool]:
        """See :meth:`taskloom.engine.ports.TaskStore.create`."""
        return await self._transact(partial(self._create, task, now))

    async def get(self, task_id: TaskId, now: datetime) -> Task | None:
        """See :meth:`taskloom.engine.ports.TaskStore.get`."""
        return await self._query(partial(tasks.get, self.dialect, task_id, now), point=True)

    async def list(self, query: TaskQuery, now: datetime) -> StorePage:
        """See :meth:`taskloom.engine.ports.TaskStore.list`."""
        return await self._query(partial(listing.page, self.dialect, query, now))

    async def count(self, query: TaskQuery, now: datetime) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.count`."""
        return await self._query(partial(listing.count, self.dialect, query, now))

    async def count_by_state(
        self, *, owner: str | None, match_owner: bool, now: datetime, at_most: int | None = None
    ) -> dict[TaskState, int]:
        """See :meth:`taskloom.engine.ports.TaskStore.count_by_state`."""
        counting = partial(listing.count_by_state, self.dialect, owner, match_owner, at_most)
        return await self._query(counting)

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        """See :meth:`taskloom.engine.ports.TaskStore.update`."""
        return await self._transact(
            partial(tasks.update, self.dialect, task_id, now, mutate, fence)
        )

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.purge_expired`."""
        return await self._transact(partial(listing.purge_expired, self.dialect, now, limit))

    async def delete_finished(self, **which: Unpack[Finished]) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.delete_finished`."""
        return await self._transact(partial(listing.delete_finished, self.dialect, which))

    # -- runs (RunStore) ------------------------------------------------------------------

    async def claim_runs(self, **terms: Unpack[ClaimTerms]) -> Sequence[ClaimedRun]:
        """See :meth:`taskloom.engine.runs.RunStore.claim_runs`."""
        claim = partial(leases.claim_runs, self.dialect, terms)
        return await self._transact(claim, durable=False)  # a lost claim is claimed again

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        """See :meth:`taskloom.engine.runs.RunStore.create_claimed` (durable, as a create)."""
        creating = partial(leases.create_claimed, self.dialect, self._create, task, claim, now)
        return await self._transact(creating)

    async def renew_leases(
        self, *, worker: str, now: Instant, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
        renew = partial(
            leases.renew_leases, self.dialect, worker=worker, now=now, lease_for=lease_for
        )
        return await self._transact(renew, durable=False)  # a lost renewal shortens a lease

    async def release_lease(self, lease: Lease) -> None:
        """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
        release = partial(runs.release_lease, self.dialect, lease)
        await self._transact(release, durable=False)  # a lease that comes back expires

    @abstractmethod
    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`: the shared script
        :func:`runs.start_node`, each dialect gathering the starts that wait at one moment
        its own way (SQLite's writer, ADR 0051; PostgreSQL's one statement, ADR 0052)."""

    @abstractmethod
    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node` (as :meth:`start_node`)."""

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        """See :meth:`taskloom.engine.runs.RunStore.finish_run`."""
        return await self._transact(
            partial(tasks.finish_run, self.dialect, lease, end, now, mutate)
        )

    async def attempts(self, task_id: TaskId) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
        return await self._query(partial(runs.attempts, self.dialect, task_id))

    async def failed_attempts(self, query: FailureQuery, now: datetime) -> Sequence[NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
        failed = partial(runs.failed_attempts, self.dialect, query, self.dialect.time(now))
        return await self._query(failed)

    async def checkpoints(self, task_id: TaskId) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.checkpoints`."""
        return await self._query(partial(runs.node_runs, self.dialect, task_id))

    async def fork_run(
        self, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
    ) -> dict[str, NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
        fork = partial(
            runs.fork_run,
            self.dialect,
            task,
            source=source,
            nodes=nodes,
            now=self.dialect.time(now),
        )
        return await self._transact(fork)

    # -- versions (VersionStore) ----------------------------------------------------------

    async def move_run(self, task_id: TaskId, now: datetime, move: RunMove) -> Task:
        """See :meth:`taskloom.engine.versions.VersionStore.move_run`."""
        return await self._transact(partial(tasks.move_run, self.dialect, task_id, now, move))
