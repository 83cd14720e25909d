"""The TaskManager: every use-case on tasks, over a TaskStore, publishing each change."""

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final, Literal, TypeVar

import anyio
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PositiveInt,
    TypeAdapter,
    ValidationError,
)

from taskloom.engine.claims import ClaimAtCreate, new_token
from taskloom.engine.clock import SystemClock
from taskloom.engine.cursor import decode_cursor, encode_cursor
from taskloom.engine.eager import EagerStarter, Reservation
from taskloom.engine.errors import (
    IdempotencyConflictError,
    InputNotRequestedError,
    InvalidAnswerError,
    InvalidRequestError,
    PersistenceError,
    StoreUnavailableError,
    TaskNotFoundError,
    TaskStateError,
    WaitOverError,
)
from taskloom.engine.events import RELEASED, ChangeFeed, TaskSubscription, Wants
from taskloom.engine.history import HistoryEntry
from taskloom.engine.ids import new_task_id
from taskloom.engine.models import (
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
    InputRequest,
    Progress,
    Task,
    TaskFailure,
    TaskId,
    TaskMutation,
    TaskPage,
    TaskQuery,
)
from taskloom.engine.observe import NullObserver, Observer, Observers
from taskloom.engine.ports import Clock, SchemaValidator, TaskStore
from taskloom.engine.runs import ClaimedRun, Lease, NodeEnd, NodeRun, RunStore
from taskloom.engine.shape import RunShape
from taskloom.engine.states import TERMINAL_STATES, TaskState, check_transition
from taskloom.engine.waits import NodeWaits, Wait


class Sentinel(Enum):
    """Markers for "any owner" and "the default TTL" (distinct from None)."""

    ANY = "any"
    DEFAULT = "default"


ANY_OWNER: Final = Sentinel.ANY
"""Pass as ``owner`` to act on a task whoever owns it (workers, operators)."""
DEFAULT: Final = Sentinel.DEFAULT
"""Pass as ``ttl_ms`` to use the configured default retention."""

OwnerScope = str | Literal[Sentinel.ANY] | None

logger = logging.getLogger(__name__)
_ONE_MICROSECOND: Final = timedelta(microseconds=1)
_JSON_OBJECT: Final = TypeAdapter(dict[str, JsonValue])
_JSON_VALUE: Final = TypeAdapter(JsonValue)
_M = TypeVar("_M", bound=BaseModel)
_PROGRESS_STATES: Final = frozenset({TaskState.RUNNING, TaskState.INPUT_REQUIRED})
_STATES: Final = frozenset(state.value for state in TaskState)


class TaskManagerSettings(BaseModel):
    """Retention, polling and paging policy of a TaskManager."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    default_ttl_ms: int | None = Field(default=30 * 24 * 3_600_000, gt=0)
    """Retention when the caller asks for none: 30 days. ``None`` keeps tasks forever."""
    workflow_ttl_ms: dict[str, PositiveInt | None] = Field(default_factory=dict)
    """Retention by workflow name when the caller asks for none, instead of
    ``default_ttl_ms`` (``None``: forever); still capped by ``max_ttl_ms``."""
    max_ttl_ms: int | None = Field(default=365 * 24 * 3_600_000, gt=0)
    """Longest retention granted (requests above are lowered to it). ``None``: no cap."""
    poll_interval_ms: int = Field(default=1_000, gt=0)
    """Poll period suggested to requestors."""
    default_page_size: int = Field(default=50, ge=1, le=1000)
    """Tasks in a listed page when the caller asks for no limit."""
    max_page_size: int = Field(default=1000, ge=1, le=1000)
    """Largest page a caller may ask for (a larger limit is refused)."""
    sweep_interval_s: float = Field(default=60.0, gt=0)
    """How often the sweeper purges expired tasks."""
    sweep_batch_size: int = Field(default=1000, ge=1)
    """Most expired tasks deleted in one transaction of a sweep."""


class TaskManager:
    """Creates, reads, lists and moves tasks; the only writer of task state.

    Every change goes through one store transaction that re-checks the transition
    table against the stored state, and is then published on :attr:`feed`. That holds
    for the writes of runs too: claims (queued to running), a run's last checkpoint with
    its outcome, a node's wait with its question, a fork; workers and runners ask the
    manager, and write only node checkpoints and leases themselves.
    """

    def __init__(
        self,
        store: TaskStore,
        *,
        runs: RunStore | None = None,
        clock: Clock | None = None,
        settings: TaskManagerSettings | None = None,
        validator: SchemaValidator | None = None,
        observer: Observer | None = None,
    ) -> None:
        self._store = store
        self._runs = runs if runs is not None else _runs_of(store)
        self._observer: Observer = Observers([observer or NullObserver()])
        self._validator = validator
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.settings = settings if settings is not None else TaskManagerSettings()
        self.feed = ChangeFeed()
        self._starters: list[EagerStarter] = []
        """Workers offered each task created here (eager start, ADR 0046)."""
        self._released: list[Callable[[TaskId], None]] = []
        """Told of each run another process hands back (see :data:`RELEASED`)."""

    @property
    def clock(self) -> Clock:
        """The manager's source of time."""
        return self._clock

    @property
    def runs(self) -> RunStore:
        """The run store: *runs* as given, or the task store when it is one too (every
        built-in store is).

        Raises:
            TypeError: neither was given.
        """
        if self._runs is None:
            raise TypeError("this TaskManager has no run store: pass runs=")
        return self._runs

    @property
    def observer(self) -> Observer:
        """Where lifecycle events go (the runner reports its runs and attempts there too)."""
        return self._observer

    # -- creating and reading -------------------------------------------------------------

    async def create(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        ttl_ms: int | Literal[Sentinel.DEFAULT] | None = DEFAULT,
        poll_interval_ms: int | None = None,
        idempotency_key: str | None = None,
        workflow_version: str | None = None,
        input_responses: Mapping[str, JsonValue] | None = None,
        parent_id: str | None = None,
        shape: RunShape | None = None,
    ) -> Task:
        """Create a queued task and return it once it is durably committed.

        When a worker of this process may run it at once (eager start, ADR 0046), the
        same transaction claims it for that worker, which starts it as the commit
        returns: the task returned is then ``running`` (``created`` and ``claimed`` in
        its history).

        With an *idempotency_key*, a second call by the same owner with the same name and
        arguments returns the first task instead of creating another. *input_responses*
        are answers the task starts with (given before it existed), by question key.
        *parent_id* makes it a child of that task (ADR 0026). *shape* is the run's shape,
        stored with it so it can be drawn without its workflow (ADR 0042).

        Raises:
            InvalidRequestError: a bad name, key, TTL or non-JSON arguments.
            IdempotencyConflictError: the key was used with another name or arguments.
        """
        task = self.draft(
            name,
            arguments,
            owner=owner,
            ttl_ms=ttl_ms,
            poll_interval_ms=poll_interval_ms,
            idempotency_key=idempotency_key,
            workflow_version=workflow_version,
            input_responses=input_responses,
            parent_id=parent_id,
            shape=shape,
        )
        reservation = self._reserve(task)
        if reservation is None:
            stored, created = await self._store.create(task, task.created_at)
        else:
            stored, created = await self._create_claimed(task, reservation)
        if created:
            self.feed.publish(stored)
            self._observer.task_created(stored)
        elif stored.name != task.name or stored.arguments != task.arguments:
            raise IdempotencyConflictError(key=idempotency_key or "", existing_task_id=stored.id)
        return stored

    @contextlib.contextmanager
    def eager_starts(self, starter: EagerStarter) -> Iterator[None]:
        """Offer *starter* every task created here until the block ends: a task it
        reserves a slot for is committed already claimed by it and runs at once
        (eager start, ADR 0046); any other is committed queued."""
        self._starters.append(starter)
        try:
            yield
        finally:
            self._starters.remove(starter)

    @contextlib.contextmanager
    def hearing_released_runs(self, listener: Callable[[TaskId], None]) -> Iterator[None]:
        """Call *listener* with the id of each run another process hands back, as its
        store announces it (:data:`RELEASED`; PostgreSQL), until the block ends."""
        self._released.append(listener)
        try:
            yield
        finally:
            self._released.remove(listener)

    def _reserve(self, task: Task) -> Reservation | None:
        for starter in self._starters:
            reservation = starter.reserve(task)
            if reservation is not None:
                return reservation
        return None

    async def _create_claimed(self, task: Task, reservation: Reservation) -> tuple[Task, bool]:
        """Create *task* claimed for *reservation*'s worker in one durable transaction,
        then start it there (or free the slot)."""
        claim = ClaimAtCreate(
            worker=reservation.worker,
            token=new_token(),
            lease_for=reservation.lease_for,
            start=lambda queued: claim_start(self._clock.now(), "started")(queued),
        )
        try:
            # Shielded: once the commit is asked for, its outcome decides what the slot
            # does; a cancelled caller is cancelled when it returns.
            with anyio.CancelScope(shield=True):
                stored, run = await self.runs.create_claimed(task, claim, self._clock.now)
        except BaseException:
            # It may have committed (an outage's unknown outcome): hand the lease back.
            reservation.cancel(claim.lease(task, expires_at=task.created_at))
            raise
        if run is None:  # the key's holder: nothing was written
            reservation.cancel(None)
            return stored, False
        reservation.start(run)
        return stored, True

    def draft(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        owner: str | None = None,
        ttl_ms: int | Literal[Sentinel.DEFAULT] | None = DEFAULT,
        poll_interval_ms: int | None = None,
        idempotency_key: str | None = None,
        workflow_version: str | None = None,
        status_message: str | None = None,
        input_responses: Mapping[str, JsonValue] | None = None,
        parent_id: str | None = None,
        shape: RunShape | None = None,
    ) -> Task:
        """The queued task :meth:`create` would store, validated but not stored (for
        operations that store it with more in one transaction, like a fork).

        Raises:
            InvalidRequestError: a bad name, key, TTL or non-JSON arguments.
        """
        now = self._clock.now()
        return _validated_task(
            {
                "id": new_task_id(),
                "name": name,
                "arguments": _json_object(arguments or {}),
                "owner": owner,
                "state": TaskState.QUEUED,
                "status_message": status_message,
                "created_at": now,
                "updated_at": now,
                "ttl_ms": self._granted_ttl(ttl_ms, name),
                "poll_interval_ms": poll_interval_ms or self.settings.poll_interval_ms,
                "idempotency_key": idempotency_key,
                "workflow_version": workflow_version,
                "input_responses": _json_object(input_responses or {}),
                "parent_id": parent_id,
                "shape": shape,
                "version": 1,
            }
        )

    async def get(self, task_id: str, *, owner: OwnerScope = ANY_OWNER) -> Task:
        """The task with this id, as visible to *owner*.

        Raises:
            TaskNotFoundError: no such task, it expired, or another owner has it.
        """
        task = await self._store.get(TaskId(task_id), self._clock.now())
        if task is None or not _visible_to(task, owner):
            raise TaskNotFoundError(task_id)
        return task

    async def history(
        self, task_id: str, *, owner: OwnerScope = ANY_OWNER
    ) -> tuple[Task, Sequence[HistoryEntry]]:
        """The task and its stored history of state and status changes, oldest first,
        read together (ADR 0036).

        Raises:
            TaskNotFoundError: no such task, it expired, or another owner has it.
        """
        found = await self._store.history(TaskId(task_id), self._clock.now())
        if found is None or not _visible_to(found[0], owner):
            raise TaskNotFoundError(task_id)
        return found

    async def list(
        self,
        *,
        owner: OwnerScope = ANY_OWNER,
        states: Iterable[TaskState] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        parent_id: str | None = None,
        names: Iterable[str] | None = None,
        id_prefix: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> TaskPage:
        """A page of tasks, newest first; pass ``next_cursor`` back for the next page.
        With *parent_id*, only that task's children (ADR 0026); with *names*, only tasks
        of these workflows; with *id_prefix*, only ids starting so; with the time bounds,
        only tasks created in ``[created_after, created_before)`` (ADR 0030); with
        *idempotency_key*, only the task holding it (ADR 0040).

        Paging is stable under concurrent inserts: no task is skipped or repeated.

        Raises:
            InvalidCursorError: the cursor was not issued here.
            InvalidRequestError: the limit is out of range.
        """
        size = self.settings.default_page_size if limit is None else limit
        if not 1 <= size <= self.settings.max_page_size:
            raise InvalidRequestError(
                f"limit must be between 1 and {self.settings.max_page_size}, got {size}"
            )
        query = TaskQuery(
            owner=None if owner is ANY_OWNER else owner,
            match_owner=owner is not ANY_OWNER,
            states=frozenset(states) if states is not None else None,
            parent_id=TaskId(parent_id) if parent_id is not None else None,
            names=frozenset(names) if names is not None else None,
            id_prefix=id_prefix,
            idempotency_key=idempotency_key,
            created_after=created_after,
            created_before=created_before,
            before=decode_cursor(cursor) if cursor is not None else None,
            limit=size,
        )
        page = await self._store.list(query, self._clock.now())
        next_cursor = encode_cursor(page.next_before) if page.next_before is not None else None
        return TaskPage(tasks=page.tasks, next_cursor=next_cursor)

    async def count(self, *, owner: OwnerScope = ANY_OWNER, states: Iterable[TaskState]) -> int:
        """How many live tasks of *owner* are in one of *states*."""
        query = TaskQuery(
            owner=None if owner is ANY_OWNER else owner,
            match_owner=owner is not ANY_OWNER,
            states=frozenset(states),
        )
        return await self._store.count(query, self._clock.now())

    async def count_by_state(
        self, *, owner: OwnerScope = ANY_OWNER, at_most: int | None = None
    ) -> dict[TaskState, int]:
        """How many tasks *owner* has in each state, each count stopping at *at_most* if
        given (see ``TaskStore.count_by_state``)."""
        counts = await self._store.count_by_state(
            owner=None if owner is ANY_OWNER else owner,
            match_owner=owner is not ANY_OWNER,
            now=self._clock.now(),
            at_most=at_most,
        )
        return dict(counts)

    # -- moving ---------------------------------------------------------------------------

    async def start(self, task_id: str, *, status_message: str | None = None) -> Task:
        """Queued to running: a worker took the task."""
        return await self._transition(
            task_id, TaskState.RUNNING, ANY_OWNER, None, status_message=status_message
        )

    async def requeue(self, task_id: str, *, status_message: str | None = None) -> Task:
        """Back to queued: a retry wait, or work reclaimed from a dead worker."""
        return await self._transition(
            task_id, TaskState.QUEUED, ANY_OWNER, None, status_message=status_message
        )

    async def note_queued(self, task_id: str, message: str) -> Task:
        """Set the status message of a task that is still queued (e.g. what it waits
        for, ADR 0039).

        Raises:
            TaskStateError: it is no longer queued, or already says *message*.
        """
        now = self._clock.now()

        def mutate(task: Task) -> Task:
            if task.state is not TaskState.QUEUED or task.status_message == message:
                raise TaskStateError(f"task {task.id} is {task.state}; no note is due")
            return _next_version(task, now, {"status_message": message})

        return await self._write(task_id, mutate)

    async def report_progress(
        self,
        task_id: str,
        *,
        completed: float,
        total: float | None = None,
        message: str | None = None,
        lease: Lease | None = None,
        planned_items: Mapping[str, int] | None = None,
    ) -> Task:
        """Record progress (and a status message) on a running task; *planned_items*
        (each expanded map's item count) go into the run's stored shape.

        Raises:
            TaskStateError: the task is not running or waiting for input.
        """
        progress = _validated(Progress, completed=completed, total=total)
        now = self._clock.now()

        def mutate(task: Task) -> Task:
            if task.state not in _PROGRESS_STATES:
                raise TaskStateError(f"task {task.id} is {task.state}; only running tasks report")
            changes: dict[str, Any] = {"progress": progress}
            if message is not None:
                changes["status_message"] = message
            if planned_items and task.shape is not None:
                changes["shape"] = task.shape.with_items(planned_items)
            return _next_version(task, now, changes)

        return await self._write(task_id, mutate, lease)

    async def require_input(
        self, task_id: str, key: str, request: InputRequest, *, lease: Lease | None = None
    ) -> Task:
        """Ask the requestor a question; the task waits in ``input_required``.

        Several questions (by distinct keys) may be pending at once.
        """
        if not 1 <= len(key) <= MAX_KEY_LENGTH:
            raise InvalidRequestError(f"input key must be 1 to {MAX_KEY_LENGTH} characters")
        now = self._clock.now()

        def mutate(task: Task) -> Task:
            if task.state is not TaskState.INPUT_REQUIRED:
                check_transition(task.id, task.state, TaskState.INPUT_REQUIRED)
            requests = {**task.input_requests, key: request}
            return _next_version(
                task,
                now,
                {
                    "state": TaskState.INPUT_REQUIRED,
                    "input_requests": requests,
                    "status_message": request.message,
                },
            )

        return await self._write(task_id, mutate, lease)

    async def provide_input(
        self, task_id: str, key: str, value: Any, *, owner: OwnerScope = ANY_OWNER
    ) -> Task:
        """Answer a pending question; when none is left the task runs again.

        The answer is checked against the question's schema when the manager has a
        validator; a bad answer changes nothing and the task keeps waiting.

        Raises:
            TaskNotFoundError: no such task visible to *owner*.
            InputNotRequestedError: no question with this key is pending.
            InvalidAnswerError: the answer does not match the question's schema.
        """
        answer = _json_value(value)
        now = self._clock.now()

        def mutate(task: Task) -> Task:
            if not _visible_to(task, owner):
                raise TaskNotFoundError(task.id)
            if key not in task.input_requests:
                raise InputNotRequestedError(task_id=task.id, key=key)
            if self._validator is not None:
                schema = task.input_requests[key].requested_schema
                problems = self._validator.problems(schema, answer)
                if problems:
                    raise InvalidAnswerError(task_id=task.id, key=key, problems=problems)
            requests = {k: v for k, v in task.input_requests.items() if k != key}
            changes: dict[str, Any] = {
                "input_requests": requests,
                "input_responses": {**task.input_responses, key: answer},
            }
            if task.parked:  # no worker holds the run: make it claimable now (ADR 0021)
                changes["wake_at"] = now if task.wake_at is None else min(task.wake_at, now)
            if not requests and task.state is TaskState.INPUT_REQUIRED:
                target = TaskState.QUEUED if task.parked else TaskState.RUNNING
                check_transition(task.id, task.state, target)
                changes["state"] = target
                changes["status_message"] = "input received"
            return _next_version(task, now, changes)

        return await self._write(task_id, mutate)

    async def complete(
        self,
        task_id: str,
        result: Any = None,
        *,
        status_message: str | None = None,
        progress: Progress | None = None,
        lease: Lease | None = None,
    ) -> Task:
        """Running to completed, storing the raw *result* (any JSON value)."""
        changes = _completion(result, status_message, progress)
        return await self._transition(task_id, TaskState.COMPLETED, ANY_OWNER, lease, **changes)

    async def complete_run(
        self,
        end: NodeEnd,
        result: Any = None,
        *,
        status_message: str | None = None,
        progress: Progress | None = None,
        lease: Lease,
    ) -> tuple[NodeRun, Task]:
        """:meth:`complete` the leased task together with *end*, its last node's end, in
        one transaction (``RunStore.finish_run``); the node's checkpoint and the task.

        Raises:
            IllegalTransitionError: the task ended meanwhile (nothing is written).
            LeaseLostError: the lease is gone, or the node is not running (nothing is written).
            TaskNotFoundError: the task is gone.
        """
        changes = _completion(result, status_message, progress)
        mutate = self._moving(TaskState.COMPLETED, ANY_OWNER, changes)
        run, task = await self.runs.finish_run(lease, end, self._clock.now(), mutate)
        self.feed.publish(task)
        self._observer.task_finished(task)
        await self._announce_relatives(task)
        return run, task

    async def wait_node(
        self, end: NodeEnd, waits: NodeWaits, *, lease: Lease
    ) -> tuple[NodeRun, Task]:
        """Record *end*, a node's attempt that stopped to wait, together with what the
        wait stores on the task (the question it asks, the time its timer ends), in one
        transaction (``RunStore.finish_run``): a crash leaves either both or neither.

        Raises:
            IllegalTransitionError: the task ended meanwhile (nothing is written).
            LeaseLostError: the lease is gone (nothing is written).
        """
        now = self._clock.now()
        key = waits.wait.key

        def mutate(task: Task) -> Task:
            if task.is_terminal:
                check_transition(task.id, task.state, TaskState.INPUT_REQUIRED)
            changes: dict[str, Any] = {}
            answered = key in task.input_responses
            if waits.question is not None and key not in task.input_requests and not answered:
                if task.state is not TaskState.INPUT_REQUIRED:
                    check_transition(task.id, task.state, TaskState.INPUT_REQUIRED)
                changes["state"] = TaskState.INPUT_REQUIRED
                changes["input_requests"] = {**task.input_requests, key: waits.question}
                changes["status_message"] = waits.question.message
            if waits.due is not None and key not in task.timers:
                changes["timers"] = {**task.timers, key: waits.due}
            return _next_version(task, now, changes)

        run, task = await self.runs.finish_run(lease, end, now, mutate)
        self.feed.publish(task)
        return run, task

    async def park(self, task_id: str, waits: Sequence[Wait], *, lease: Lease) -> Task:
        """Hand a run back while its nodes wait for *waits*: the task is marked parked,
        claimable again at its earliest timer (or once an answer arrives), and the store
        drops *lease* with the same write. A running task waiting only for time is
        queued again; one waiting for answers stays ``input_required``.

        Raises:
            WaitOverError: one of *waits* is over already (nothing is written).
            LeaseLostError: the lease is gone.
            IllegalTransitionError: the task ended meanwhile.
        """
        now = self._clock.now()

        def mutate(task: Task) -> Task:
            if task.is_terminal:
                check_transition(task.id, task.state, TaskState.QUEUED)
            if any(wait.is_over(task, now) for wait in waits):
                raise WaitOverError(f"task {task.id}: a wait ended before the run was parked")
            times = [due for wait in waits if (due := wait.wakes_at(task)) is not None]
            wake_at = min(times) if times else None
            changes: dict[str, Any] = {"parked": True, "wake_at": wake_at}
            if task.state is TaskState.RUNNING:
                changes["state"] = TaskState.QUEUED
                if wake_at is not None:
                    changes["status_message"] = f"waiting until {wake_at.isoformat()}"
            return _next_version(task, now, changes)

        return await self._write(task_id, mutate, lease)

    async def fail(self, task_id: str, error: TaskFailure, *, lease: Lease | None = None) -> Task:
        """To failed, with the reason as *error* (its message becomes the status message)."""
        return await self._transition(
            task_id, TaskState.FAILED, ANY_OWNER, lease, error=error, status_message=error.message
        )

    async def cancel(
        self, task_id: str, *, reason: str | None = None, owner: OwnerScope = ANY_OWNER
    ) -> Task:
        """To cancelled; it stays cancelled whatever its work does later.

        Raises:
            TaskNotFoundError: no such task visible to *owner*.
            IllegalTransitionError: the task is already terminal.
        """
        return await self._transition(
            task_id, TaskState.CANCELLED, owner, None, status_message=reason or "cancelled"
        )

    # -- runs -----------------------------------------------------------------------------

    async def claim(
        self,
        *,
        worker: str,
        workflows: frozenset[str | tuple[str, str]],
        lease_for: timedelta,
        limit: int,
        reclaim_from: str | None = None,
        per_owner: int | None = None,
        reserved: Mapping[TaskId, str | None] | None = None,
    ) -> Sequence[ClaimedRun]:
        """Claim runs for *worker* (``RunStore.claim_runs``): queued tasks move to
        running, parked runs are held again; each claimed task is published.

        The store reads the clock inside the transaction attempt that commits, for the
        leases and the tasks' new versions alike: a claim retried through an outage
        never lands with a lease that expired before it did (ADR 0038)."""
        claimed = await self.runs.claim_runs(
            worker=worker,
            workflows=workflows,
            now=self._clock.now,
            lease_for=lease_for,
            limit=limit,
            start=lambda task: claim_start(self._clock.now(), "started")(task),
            reclaim_from=reclaim_from,
            per_owner=per_owner,
            reserved=reserved or {},
        )
        for run in claimed:
            self.feed.publish(run.task)
        return claimed

    async def fork_run(
        self, task: Task, *, source: str, nodes: frozenset[str]
    ) -> dict[str, NodeRun]:
        """Store *task* (a :meth:`draft`) with copies of the completed checkpoints of
        *source* named in *nodes*, in one transaction (``RunStore.fork_run``); publish it.

        Raises:
            TaskNotFoundError: *source* does not exist or has expired (nothing is stored).
        """
        copies = await self.runs.fork_run(
            task, source=TaskId(source), nodes=nodes, now=self._clock.now()
        )
        self.feed.publish(task)
        self._observer.task_created(task)
        return copies

    async def notice(self, task_id: str, state: str | None = None) -> None:
        """Publish here a change another process made to a task (PostgreSQL's NOTIFY),
        so this process's workers and waiters react to it; a task gone, or a store that
        does not answer, is skipped (polls and heartbeats still find it). With the new
        *state* the change announced, the task is read only if a subscription wants it
        (``ChangeFeed.wanted``): a worker, for one, ignores other workers' claims and ends.
        A run handed back (:data:`RELEASED`) is told to :meth:`hearing_released_runs`'
        listeners, and nothing is read."""
        if state == RELEASED:
            for listener in list(self._released):
                listener(TaskId(task_id))
            return
        if state in _STATES and not self.feed.wanted(TaskId(task_id), TaskState(state)):
            return
        try:
            task = await self.get(task_id)
        except (TaskNotFoundError, PersistenceError):
            return
        self.feed.publish(task)

    # -- waiting and housekeeping ---------------------------------------------------------

    def subscribe(
        self, task_ids: Iterable[str] | None = None, *, wants: Wants | None = None
    ) -> TaskSubscription:
        """Changes committed in this process, for all tasks or only *task_ids*, and those
        other processes announce (:meth:`notice`; *wants*: see ``ChangeFeed.subscribe``)."""
        ids = None if task_ids is None else [TaskId(task_id) for task_id in task_ids]
        return self.feed.subscribe(ids, wants=wants)

    async def wait_until_terminal(
        self,
        task_id: str,
        *,
        owner: OwnerScope = ANY_OWNER,
        recheck_every: float | None = None,
    ) -> Task:
        """Wait for the task to reach a terminal state; bound the wait with a cancel scope.

        Changes made in this process wake the waiter at once. With *recheck_every*, the
        store is read again at that period too, for changes made by other processes.
        """
        with self.subscribe([task_id]) as subscription:
            task = await self.get(task_id, owner=owner)
            while not task.is_terminal:
                task = await self._next_change(subscription, task_id, owner, recheck_every)
            return task

    async def watch(
        self,
        task_id: str,
        *,
        owner: OwnerScope = ANY_OWNER,
        recheck_every: float | None = None,
    ) -> AsyncGenerator[Task]:
        """Yield the task as it is now, then each newer version, ending after a terminal one.

        Versions that change faster than the consumer reads are coalesced (the newest
        wins), so a terminal version is never missed. With *recheck_every*, the store is
        read again at that period too, for changes made by other processes. Close the
        iterator (``contextlib.aclosing``) when leaving early.

        Raises:
            TaskNotFoundError: no such task visible to *owner* (also if it expires meanwhile).
        """
        with self.subscribe([task_id]) as subscription:
            task = await self.get(task_id, owner=owner)
            yield task
            while not task.is_terminal:
                changed = await self._next_change(subscription, task_id, owner, recheck_every)
                if changed.version > task.version:
                    task = changed
                    yield task

    async def _next_change(
        self,
        subscription: TaskSubscription,
        task_id: str,
        owner: OwnerScope,
        recheck_every: float | None,
    ) -> Task:
        """The next change from *subscription*, or the stored task after *recheck_every*
        seconds without one (no timer at all without it)."""
        if not recheck_every:
            return await subscription.receive()
        with anyio.move_on_after(recheck_every) as scope:
            changed = await subscription.receive()
        if scope.cancelled_caught:
            changed = await self.get(task_id, owner=owner)
        return changed

    async def purge_expired(self) -> int:
        """Delete every expired task now; return how many."""
        batch = self.settings.sweep_batch_size
        purged = 0
        while True:
            count = await self._store.purge_expired(self._clock.now(), batch)
            purged += count
            if count < batch:
                return purged

    async def run_sweeper(self) -> None:
        """Purge expired tasks every ``sweep_interval_s`` until cancelled. A store that
        fails (a database outage, a lock held too long) is logged and tried again at the
        next sweep: it never ends the sweeper, nor the engine it runs in."""
        while True:
            try:
                await self.purge_expired()
            except PersistenceError as error:
                logger.log(
                    logging.DEBUG if isinstance(error, StoreUnavailableError) else logging.WARNING,
                    "the TTL sweep failed, trying again in %.3g s: %s: %s",
                    self.settings.sweep_interval_s,
                    type(error).__name__,
                    error,
                )
            await anyio.sleep(self.settings.sweep_interval_s)

    # -- internals ------------------------------------------------------------------------

    def _granted_ttl(
        self, requested: int | Literal[Sentinel.DEFAULT] | None, name: str
    ) -> int | None:
        ttl = (
            self.settings.workflow_ttl_ms.get(name, self.settings.default_ttl_ms)
            if requested is DEFAULT
            else requested
        )
        if ttl is not None and ttl <= 0:
            raise InvalidRequestError(f"ttl must be a positive number of milliseconds, got {ttl}")
        cap = self.settings.max_ttl_ms
        if cap is None:
            return ttl
        return cap if ttl is None else min(ttl, cap)

    async def _transition(
        self,
        task_id: str,
        target: TaskState,
        owner: OwnerScope,
        lease: Lease | None,
        **changes: Any,
    ) -> Task:
        task = await self._write(task_id, self._moving(target, owner, changes), lease)
        if task.is_terminal:
            self._observer.task_finished(task)
            await self._announce_relatives(task)
        return task

    async def _announce_relatives(self, task: Task) -> None:
        """Publish what the store changed with *task*'s end (ADR 0026): its parent (the
        end recorded, a parked run woken) and, after a cancel or a failure, its children
        (cancelled with it, recursively), so this process's workers react at once."""
        with contextlib.suppress(PersistenceError):  # best effort: other paths find them
            await self._publish_relatives(task)

    async def _publish_relatives(self, task: Task) -> None:
        now = self._clock.now()
        if task.parent_id is not None:
            parent = await self._store.get(task.parent_id, now)
            if parent is not None:
                self.feed.publish(parent)
        if task.state is TaskState.COMPLETED:
            return  # a completed run waited for each child it started: none is left
        pending = [task.id]
        while pending:
            query = TaskQuery(parent_id=pending.pop(), limit=self.settings.max_page_size)
            for child in (await self._store.list(query, now)).tasks:
                self.feed.publish(child)
                pending.append(child.id)

    def _moving(
        self, target: TaskState, owner: OwnerScope, changes: dict[str, Any]
    ) -> TaskMutation:
        """The move to *target* with *changes*, if *owner* sees the task and the table allows it."""
        now = self._clock.now()
        if target in TERMINAL_STATES:
            changes["input_requests"] = {}
            changes["parked"] = False
            changes["wake_at"] = None
        if changes.get("status_message") is None:
            changes.pop("status_message", None)

        def mutate(task: Task) -> Task:
            if not _visible_to(task, owner):
                raise TaskNotFoundError(task.id)
            check_transition(task.id, task.state, target)
            return _next_version(task, now, {**changes, "state": target})

        return mutate

    async def _write(self, task_id: str, mutate: TaskMutation, lease: Lease | None = None) -> Task:
        task = await self._store.update(TaskId(task_id), self._clock.now(), mutate, lease)
        self.feed.publish(task)
        return task


def claim_start(now: datetime, status_message: str | None = None) -> TaskMutation:
    """The change a claim makes at *now*: a queued task moves to running, and a parked
    run is held again (a parked task that still waits for answers stays
    ``input_required``)."""
    started: dict[str, Any] = {"state": TaskState.RUNNING}
    if status_message is not None:
        started["status_message"] = status_message

    def mutate(task: Task) -> Task:
        changes: dict[str, Any] = {"parked": False, "wake_at": None}
        if task.state is not TaskState.INPUT_REQUIRED or not task.parked:
            check_transition(task.id, task.state, TaskState.RUNNING)
            changes.update(started)
        return _next_version(task, now, changes)

    return mutate


def _runs_of(store: TaskStore) -> RunStore | None:
    """*store* as a run store, when it is one (it has every method of the port)."""
    return store if isinstance(store, RunStore) else None


def _visible_to(task: Task, owner: OwnerScope) -> bool:
    return owner is ANY_OWNER or task.owner == owner


def _next_version(task: Task, now: datetime, changes: Mapping[str, Any]) -> Task:
    """The task after *changes*, one version later, with a strictly later ``updated_at``."""
    updated_at = max(now, task.updated_at + _ONE_MICROSECOND)
    return task.model_copy(
        update={**changes, "updated_at": updated_at, "version": task.version + 1}
    )


def _completion(
    result: Any, status_message: str | None, progress: Progress | None
) -> dict[str, Any]:
    changes: dict[str, Any] = {"result": _json_value(result), "status_message": status_message}
    if progress is not None:
        changes["progress"] = progress
    return changes


def _validated_task(fields: dict[str, Any]) -> Task:
    name = fields["name"]
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidRequestError(f"task name must be 1 to {MAX_NAME_LENGTH} characters")
    try:
        return Task.model_validate(fields)
    except ValidationError as error:
        raise InvalidRequestError(_first_problem(error)) from error


def _validated(model: type[_M], **fields: Any) -> _M:
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise InvalidRequestError(_first_problem(error)) from error


def _json_object(value: Mapping[str, Any]) -> dict[str, JsonValue]:
    try:
        return _JSON_OBJECT.validate_python(dict(value))
    except ValidationError as error:
        raise InvalidRequestError("arguments must be a JSON object") from error


def _json_value(value: Any) -> JsonValue:
    try:
        return _JSON_VALUE.validate_python(value)
    except ValidationError as error:
        raise InvalidRequestError(
            "value must be JSON (objects, arrays, strings, numbers)"
        ) from error


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "value"
    return f"{where}: {problem['msg']}"
