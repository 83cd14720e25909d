"""The task as the engine sees it: immutable pydantic models, no wire names."""

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, NewType

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetPydanticSchema,
    JsonValue,
)

from taskloom.engine.shape import RunShape
from taskloom.engine.states import TaskState, is_terminal

TaskId = NewType("TaskId", str)
"""An unguessable task id (at least 128 random bits)."""


def _utc_schema(source: type[datetime], handler: GetCoreSchemaHandler) -> Any:
    """A datetime at UTC offset zero, checked by pydantic-core (no Python call per value)."""
    return {**handler(source), "tz_constraint": 0}


UtcDatetime = Annotated[datetime, GetPydanticSchema(_utc_schema)]
"""A timezone-aware UTC timestamp: a naive one, or one at another offset, is refused."""

MAX_NAME_LENGTH: Final = 200
MAX_KEY_LENGTH: Final = 200


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Progress(_Frozen):
    """How far a task has come, in the units its workflow chooses."""

    completed: float = Field(ge=0)
    total: float | None = Field(default=None, gt=0)


class TaskFailure(_Frozen):
    """Why a task failed: shown to a person, grouped by fingerprint (a record, not an exception)."""

    code: str
    """A stable machine-readable kind, e.g. ``node_failed`` or ``interrupted``."""
    message: str
    error_type: str | None = None
    """The exception class name, when the failure came from code."""
    fingerprint: str | None = None
    """A stable hash that groups failures with the same cause."""
    details: JsonValue = None


class InputRequest(_Frozen):
    """A question the task waits on: a message and the JSON schema an answer must match."""

    message: str
    requested_schema: dict[str, JsonValue]


class Task(_Frozen):
    """One durable task: a tool call turned into a unit of work that outlives the request."""

    id: TaskId
    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    """The tool or workflow that runs it."""
    arguments: dict[str, JsonValue]
    owner: str | None = Field(min_length=1, max_length=MAX_KEY_LENGTH)
    """The principal that created it; ``None`` for an unauthenticated local caller."""
    state: TaskState
    status_message: str | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime
    """Time of the last change (never of a read); strictly increases with every write."""
    ttl_ms: int | None = Field(gt=0)
    """Retention from creation in milliseconds; ``None`` keeps the task forever."""
    poll_interval_ms: int | None = Field(default=None, gt=0)
    progress: Progress | None = None
    result: JsonValue = None
    """The raw outcome of a completed task, stored once; each wire derives its view."""
    error: TaskFailure | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_LENGTH)
    workflow_version: str | None = None
    input_requests: dict[str, InputRequest] = Field(default_factory=dict)
    """Questions still waiting for an answer, by key."""
    input_responses: dict[str, JsonValue] = Field(default_factory=dict)
    """Answers received, by key, kept so a re-run node can read them."""
    timers: dict[str, UtcDatetime] = Field(default_factory=dict)
    """When each durable sleep (``ctx.sleep``) ends, by key, kept so a re-run node knows."""
    parked: bool = False
    """No worker holds the run: its nodes wait (answers, timers) and it is claimed again
    once ``wake_at`` has passed (never while ``wake_at`` is ``None``)."""
    wake_at: UtcDatetime | None = None
    """When a parked run may be claimed again: its earliest timer, or the time an answer
    arrived."""
    parent_id: TaskId | None = None
    """The task whose node started this one as a child workflow (``ctx.child``), if any."""
    shape: RunShape | None = None
    """The run's phases, nodes and map item counts (ADR 0042), for drawing it without its
    workflow's module; ``None`` for a task that is no workflow run, or one stored before."""
    ended_children: list[TaskId] = Field(default_factory=list)
    """Children of this task that have ended, in the order they did: recorded by the
    store in the transaction that ends each one, so a waiting node knows (ADR 0026)."""
    version: int = Field(ge=1)
    """Row version: 1 at creation, +1 on every write (the compare-and-set token)."""

    @property
    def expires_at(self) -> datetime | None:
        """When the task may be purged, or ``None`` if never."""
        if self.ttl_ms is None:
            return None
        return self.created_at + timedelta(milliseconds=self.ttl_ms)

    @property
    def is_terminal(self) -> bool:
        """True once the task can never change state again."""
        return is_terminal(self.state)

    def is_expired(self, now: datetime) -> bool:
        """True when the TTL has run out at *now*."""
        expires_at = self.expires_at
        return expires_at is not None and now >= expires_at


_IMMUTABLE_FIELDS: Final = (
    "id",
    "name",
    "arguments",
    "owner",
    "created_at",
    "ttl_ms",
    "idempotency_key",
    "parent_id",
)


TaskMutation = Callable[[Task], Task]
"""A pure function from the stored task to its next version; may raise an engine error.
Every change of a task's state is one (the TaskManager makes them; stores apply them)."""


def ensure_successor(current: Task, new: Task) -> None:
    """Check that *new* is a legal next version of *current* (a programming-error guard).

    Raises:
        ValueError: the version does not advance by one, time goes backwards, or a field
            that never changes after creation was changed.
    """
    if new.version != current.version + 1:
        raise ValueError(f"task {current.id}: version must go from {current.version} to +1")
    if new.updated_at <= current.updated_at:
        raise ValueError(f"task {current.id}: updated_at must increase")
    for field in _IMMUTABLE_FIELDS:
        if getattr(new, field) != getattr(current, field):
            raise ValueError(f"task {current.id}: {field} cannot change after creation")


class TaskQuery(_Frozen):
    """What a store's ``list`` returns: newest first, after a position, with filters."""

    owner: str | None = None
    """Only this owner's tasks, when ``match_owner`` is set."""
    match_owner: bool = False
    states: frozenset[TaskState] | None = None
    parent_id: TaskId | None = None
    """Only the children of this task, when set."""
    names: frozenset[str] | None = None
    """Only tasks of these workflows (or tools), when set."""
    id_prefix: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_LENGTH)
    """Only tasks whose id starts with this, when set."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_LENGTH)
    """Only the task of ``owner`` holding this idempotency key, when set (keys are per
    owner, whatever ``match_owner`` says)."""
    created_after: UtcDatetime | None = None
    """Only tasks created at or after this time, when set."""
    created_before: UtcDatetime | None = None
    """Only tasks created before this time, when set. Stores may turn both time bounds
    into bounds on their positions, which follow creation order."""
    before: int | None = None
    """Store position to continue from (exclusive); ``None`` starts at the newest task."""
    limit: int = Field(default=50, ge=1, le=1000)


class StorePage(_Frozen):
    """One page from a store: the tasks and the position to continue from, if any remain."""

    tasks: tuple[Task, ...]
    next_before: int | None


class TaskPage(_Frozen):
    """One page for a caller: the tasks and an opaque cursor for the next page."""

    tasks: tuple[Task, ...]
    next_cursor: str | None
