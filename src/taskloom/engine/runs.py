"""The durable state of workflow runs: leases, node checkpoints and node attempts."""

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import (
    TYPE_CHECKING,
    Final,
    NotRequired,
    Protocol,
    TypedDict,
    TypeVar,
    Unpack,
    runtime_checkable,
)

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from taskloom.engine.models import Task, TaskId, TaskMutation, UtcDatetime

if TYPE_CHECKING:
    from taskloom.engine.claims import ClaimAtCreate

Instant = datetime | Callable[[], datetime]
"""A time given to a run-store method: a fixed time, or a clock's ``now`` that the store
calls inside each transaction attempt. Leases are computed from the latter, so a
transaction retried through an outage never commits a lease from a time taken before
its retries (one already expired as it lands)."""


def at(now: Instant) -> datetime:
    """The time *now* stands for, read at this moment (call it inside the attempt)."""
    return now() if callable(now) else now


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_M = TypeVar("_M", bound=_Frozen)


class NodeState(StrEnum):
    """A node's checkpointed state within one run."""

    RUNNING = "running"
    """An attempt started and has not ended (or its worker died)."""
    RETRYING = "retrying"
    """An attempt failed; the next may not start before ``not_before``."""
    WAITING = "waiting"
    """An attempt stopped to wait (``waiting_for``: an answer, a time); the node runs
    again from its start once the wait is over. Not running: no worker death counts."""
    COMPLETED = "completed"
    """The node's output is stored; it never runs again."""
    FAILED = "failed"
    """Every allowed attempt failed."""


class AttemptOutcome(StrEnum):
    """How one node attempt ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    """Its worker stopped (crash, kill -9) before the attempt ended."""
    WAITING = "waiting"
    """It stopped to wait durably (``ctx.ask``, ``ctx.sleep``); the run was handed back."""


FAILURE_OUTCOMES: Final = frozenset({AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT})
"""Outcomes that use up a node's retry budget."""


class ErrorInfo(_Frozen):
    """An exception as it is stored: type, message and a stable fingerprint."""

    error_type: str
    message: str
    fingerprint: str


class NodeRun(_Frozen):
    """A node's checkpoint: its state, attempts so far, and its output once completed."""

    node: str
    state: NodeState
    attempt: int = Field(ge=1)
    """Attempts started so far."""
    failures: int = Field(default=0, ge=0)
    """Attempts that failed or timed out (what the retry policy counts)."""
    interruptions: int = Field(default=0, ge=0)
    """Attempts whose worker died while running them (they use no retry budget)."""
    not_before: UtcDatetime | None = None
    """A retry's earliest start, or the end of a timer a waiting node sleeps on."""
    waiting_for: str | None = None
    """What a ``waiting`` node waits for (see :mod:`taskloom.engine.waits`)."""
    output: JsonValue = None
    error: ErrorInfo | None = None
    updated_at: UtcDatetime


_set_attribute = object.__setattr__


def _trusted(model: type[_M], values: dict[str, object], fields_set: set[str]) -> _M:
    """An instance of the frozen *model* holding *values* (every field), built as
    ``model.model_construct`` builds it with every field given, without its loop over
    the fields (about three times faster) and without validating: for values already
    checked. ``tests/unit/test_trusted_node_run.py`` holds it to pydantic's.

    *fields_set* is those validation would set (the fields its caller gives), shared by
    the instances built alike: a frozen model never changes its own, and a copy gets a
    copy of it (fewer objects per node, fewer for the garbage collector to walk: a
    10,000-item map keeps 10,000 checkpoints)."""
    instance = model.__new__(model)
    _set_attribute(instance, "__dict__", values)
    _set_attribute(instance, "__pydantic_fields_set__", fields_set)
    _set_attribute(instance, "__pydantic_extra__", None)
    _set_attribute(instance, "__pydantic_private__", None)
    return instance


def trusted_node_run(
    node: str,
    state: NodeState,
    attempt: int,
    failures: int,
    interruptions: int,
    not_before: datetime | None,
    waiting_for: str | None,
    output: JsonValue,
    error: ErrorInfo | None,
    updated_at: datetime,
) -> NodeRun:
    """A checkpoint from values already checked (a store's columns, whose types and
    checks hold what the model checks): a store builds one at each node's start and end
    (ADR 0051)."""
    values: dict[str, object] = {
        "node": node,
        "state": state,
        "attempt": attempt,
        "failures": failures,
        "interruptions": interruptions,
        "not_before": not_before,
        "waiting_for": waiting_for,
        "output": output,
        "error": error,
        "updated_at": updated_at,
    }
    return _trusted(NodeRun, values, _NODE_RUN_FIELDS)


def trusted_start(
    node: str, attempt: int, interruptions: int, interrupted_attempt: int | None
) -> "NodeStart":
    """An attempt's start from values the runner counted (*attempt* from 1, never
    negative *interruptions*): not validated again, one is made per node run (ADR 0054)."""
    values: dict[str, object] = {
        "node": node,
        "attempt": attempt,
        "interruptions": interruptions,
        "interrupted_attempt": interrupted_attempt,
    }
    return _trusted(NodeStart, values, _START_FIELDS)


def completed_end(node: str, attempt: int, output: JsonValue) -> "NodeEnd":
    """The end of an attempt that completed with *output*, already JSON (the node's
    output dumped by its adapter) and *attempt* counted from 1: not validated again (a
    1,000-item output costs about 0.25 ms to validate as ``JsonValue``)."""
    values: dict[str, object] = {
        "node": node,
        "attempt": attempt,
        "outcome": AttemptOutcome.COMPLETED,
        "state": NodeState.COMPLETED,
        "output": output,
        "error": None,
        "not_before": None,
        "interruptions": None,
        "waiting_for": None,
    }
    return _trusted(NodeEnd, values, _COMPLETED_END_FIELDS)


class NodeAttempt(_Frozen):
    """One attempt at a node, for the execution history."""

    task_id: TaskId
    node: str
    attempt: int = Field(ge=1)
    worker: str
    started_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    outcome: AttemptOutcome | None = None
    error: ErrorInfo | None = None

    @property
    def duration(self) -> timedelta | None:
        """How long the attempt took, once it ended."""
        return self.ended_at - self.started_at if self.ended_at is not None else None


class Lease(_Frozen):
    """A worker's claim on a run, extended by heartbeat; the token fences every write."""

    task_id: TaskId
    worker: str
    token: str
    expires_at: UtcDatetime


class ClaimedRun(_Frozen):
    """A run a worker now owns: the task, the lease, and the checkpoints to resume from."""

    task: Task
    lease: Lease
    nodes: dict[str, NodeRun]
    resumed: bool
    """True when the run had been started before (by this or another worker)."""


class NodeStart(_Frozen):
    """What a worker records as it starts an attempt."""

    node: str
    attempt: int = Field(ge=1)
    interruptions: int = Field(default=0, ge=0)
    interrupted_attempt: int | None = None
    """An earlier attempt of this node that a dead worker left open, to close as interrupted."""


class NodeEnd(_Frozen):
    """What a worker records as an attempt ends."""

    node: str
    attempt: int = Field(ge=1)
    outcome: AttemptOutcome
    state: NodeState
    """The node's state after this attempt (``retrying`` if another attempt follows)."""
    output: JsonValue = None
    error: ErrorInfo | None = None
    not_before: UtcDatetime | None = None
    interruptions: int | None = Field(default=None, ge=0)
    """The node's new count of worker deaths, when this end records one (a give-up)."""
    waiting_for: str | None = None
    """What the node waits for, when *state* is ``waiting``."""


_NODE_RUN_FIELDS: Final[set[str]] = set(NodeRun.model_fields)
"""The fields :func:`trusted_node_run` sets: every one."""
_COMPLETED_END_FIELDS: Final[set[str]] = {"node", "attempt", "outcome", "state", "output"}
"""The fields :func:`completed_end` sets: those a validated completed end is given (its
error, wait, timer and interruptions left at their defaults, unset)."""
_START_FIELDS: Final[set[str]] = {"node", "attempt", "interruptions", "interrupted_attempt"}
"""The fields :func:`trusted_start` sets: every one (the runner names all four)."""


def node_started(previous: NodeRun | None, start: NodeStart, now: datetime) -> NodeRun:
    """A node's checkpoint as an attempt starts: running, its failures, the last
    attempt's error and a completed node's output kept (until this one ends), the wait
    and retry time cleared."""
    return NodeRun(
        node=start.node,
        state=NodeState.RUNNING,
        attempt=start.attempt,
        failures=previous.failures if previous is not None else 0,
        interruptions=start.interruptions,
        error=previous.error if previous is not None else None,
        output=previous.output if previous is not None else None,
        updated_at=now,
    )


def node_ended(current: NodeRun | None, end: NodeEnd, now: datetime) -> NodeRun | None:
    """A node's checkpoint after *end*, or ``None`` if the node is not running that
    attempt (the end does not land). A failure or time-out counts against the retry
    budget; only a completed node keeps an output."""
    if current is None or current.state is not NodeState.RUNNING or current.attempt != end.attempt:
        return None
    return current.model_copy(
        update={
            "state": end.state,
            "failures": current.failures + int(end.outcome in FAILURE_OUTCOMES),
            "output": end.output if end.state is NodeState.COMPLETED else None,
            "error": end.error,
            "not_before": end.not_before,
            "waiting_for": end.waiting_for,
            "interruptions": (
                current.interruptions if end.interruptions is None else end.interruptions
            ),
            "updated_at": now,
        }
    )


def node_interrupted(run: NodeRun, now: datetime) -> NodeRun:
    """A node's checkpoint when its run ends with it still running: ``retrying``, with one
    more interruption (what a resume would have written)."""
    if run.state is not NodeState.RUNNING:
        return run
    return run.model_copy(
        update={
            "state": NodeState.RETRYING,
            "interruptions": run.interruptions + 1,
            "updated_at": now,
        }
    )


class FailureQuery(_Frozen):
    """Which failed attempts to read: those of one owner's tasks, or of every task."""

    owner: str | None = None
    """Only attempts of this owner's tasks, when ``match_owner`` is set."""
    match_owner: bool = False
    limit: int = Field(default=100, ge=1, le=10_000)


class ClaimTerms(TypedDict):
    """The terms of a claim (:meth:`RunStore.claim_runs`), declared once for every store."""

    worker: str
    workflows: frozenset[str | tuple[str, str]]
    now: Instant
    lease_for: timedelta
    limit: int
    start: TaskMutation
    """Applied to each queued (or parked) task claimed: its move to running."""
    reclaim_from: NotRequired[str | None]
    per_owner: NotRequired[int | None]
    reserved: NotRequired[Mapping[TaskId, str | None]]
    """Runs *worker* holds for eager creates in flight (ADR 0046): task id -> owner.
    Each counts as one lease of its owner, whether its create has committed yet or not."""


def ends_queued(runs: object) -> bool:
    """Whether *runs* (a :class:`RunStore`) says its node ends are queued: once
    ``end_node`` is called, the end is committed (or refused) whether or not its caller
    still waits for the answer, so a caller cancelled while it waits leaves the end to
    land as it would have. Such a store has the class attribute ``node_ends_queued =
    True`` (SQLite's group-commit writer, which drains its queue before the store
    closes); the runner then waits for an end without a shielded scope (ADR 0056).
    Other stores' ends are shielded from cancellation by their caller. The attribute is
    read from the class: a wrapper that passes attributes on (``__getattr__``) may yield
    before it calls ``end_node``, so it is shielded unless its own class says otherwise."""
    owner = runs if isinstance(runs, type) else type(runs)
    return getattr(owner, "node_ends_queued", False) is True


@runtime_checkable
class RunStore(Protocol):
    """Durable run state. Every method is one atomic transaction; writes that carry a
    lease only land while that lease is the task's current one.

    The fenced write that ends a run (``TaskStore.update`` with a lease to a terminal
    state, or :meth:`finish_run`) drops the lease and closes the attempts no worker will
    end (a dead worker's, or one cancelled as it started): each is recorded as
    ``interrupted`` and its node, if still ``running``, becomes ``retrying`` with one
    more interruption, the record a resume would have written.
    """

    async def claim_runs(self, **terms: Unpack[ClaimTerms]) -> Sequence[ClaimedRun]:
        """Claim up to *limit* runs of *workflows* (the :class:`ClaimTerms`): queued tasks, and active tasks whose
        lease expired (or belongs to *reclaim_from*, a dead earlier incarnation of this
        worker). Queued tasks are moved to running with *start*. Which runs are
        claimable is :class:`taskloom.engine.claims.ClaimRule` (``ClaimRule.of(workflows,
        reclaim_from)``): a bare name in *workflows* admits every version of it, a
        (name, version) pair that version only.

        Fair across owners (ADR 0028): the owner holding the fewest of *worker*'s leases
        goes first, round-robin, each owner's runs oldest first; with *per_owner*, no
        named owner ends up holding more than that many of *worker*'s leases (tasks
        with no owner, the local user's, are not capped). The runs *reserved* count as
        leases of *worker* held by their owners.

        Leases expire at *now* + *lease_for*, *now* read inside the transaction attempt
        that commits (see :data:`Instant`)."""
        ...

    async def create_claimed(
        self, task: Task, claim: "ClaimAtCreate", now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        """``TaskStore.create`` of *task* (new, queued), claimed in the same transaction
        (eager start, ADR 0046): the task is stored as ``claim.applied(task, now)``
        leaves it, with its lease and the history rows ``created`` then ``claimed``
        (*now* read inside the transaction attempt that commits). Returns the stored task
        and the claimed run; or, when *task*'s owner already holds a live task with its
        idempotency key, that task and ``None``, writing nothing. Returns only after the
        write is committed, durably, as a create."""
        ...

    async def renew_leases(
        self, *, worker: str, now: Instant, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        """Extend every lease *worker* holds to *now* + *lease_for* (*now* read inside the
        transaction attempt that commits); return each leased task as it is now
        (``None`` if it vanished), so the worker can notice cancellations."""
        ...

    async def release_lease(self, lease: Lease) -> None:
        """Give a run back (if the lease is still this one)."""
        ...

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        """Checkpoint that an attempt starts, and open its history record.

        Raises:
            LeaseLostError: the lease is no longer the task's.
            TaskStateError: the task has ended (cancelled, failed): no node may start.
        """
        ...

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        """Checkpoint an attempt's end (output and state in one transaction).

        Raises:
            LeaseLostError: the lease is no longer the task's.
        """
        ...

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        """:meth:`end_node` with *end* and the fenced ``TaskStore.update`` of the task with
        *mutate* (a terminal task drops the lease), in one transaction:
        a run's last checkpoint and its outcome commit together. Returns both. If either
        part is refused, nothing is written.

        Checked in this order: the task, the lease, the node, the mutation.

        Raises:
            TaskNotFoundError: no live task has this id.
            LeaseLostError: the lease is no longer the task's, or the node is not running
                this attempt.
            TaskloomError: whatever *mutate* raised (``IllegalTransitionError`` when the
                task was cancelled meanwhile).
        """
        ...

    async def attempts(self, task_id: TaskId) -> Sequence[NodeAttempt]:
        """Every attempt of every node of a task, oldest first."""
        ...

    async def failed_attempts(self, query: FailureQuery, now: datetime) -> Sequence[NodeAttempt]:
        """Up to ``query.limit`` attempts that failed or timed out, latest end first, of
        the live (unexpired) tasks *query* selects."""
        ...

    async def checkpoints(self, task_id: TaskId) -> dict[str, NodeRun]:
        """The checkpoint of every node of a task that has started, by node name."""
        ...

    async def fork_run(
        self, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
    ) -> dict[str, NodeRun]:
        """Store *task* (a new queued task) and copy to it the checkpoints of the nodes of
        *source* named in *nodes* that are completed, in one transaction; return the copies.

        Raises:
            TaskNotFoundError: *source* does not exist or has expired (nothing is stored).
        """
        ...
