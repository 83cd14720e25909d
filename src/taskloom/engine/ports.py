"""What the engine needs from the outside world, as Protocols. Adapters do not inherit."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, Required, TypedDict, Unpack

from pydantic import JsonValue

from taskloom.engine.history import HistoryEntry
from taskloom.engine.models import StorePage, Task, TaskId, TaskMutation, TaskQuery
from taskloom.engine.runs import Lease
from taskloom.engine.states import TERMINAL_STATES, TaskState


class Clock(Protocol):
    """A source of the current time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait *seconds* of this clock's time (retry backoff)."""
        ...


class SchemaValidator(Protocol):
    """Checks a value against a JSON schema (used for answers to input requests)."""

    def problems(self, schema: Mapping[str, JsonValue], value: JsonValue) -> list[str]:
        """Human-readable reasons why *value* does not match *schema*; empty if it does."""
        ...


class Finished(TypedDict, total=False):
    """Which ended tasks :meth:`TaskStore.delete_finished` deletes, declared once."""

    limit: Required[int]
    task_ids: Sequence[str] | None
    finished_before: datetime | None
    states: frozenset[TaskState]
    """Default: every terminal state (:func:`finished_states`)."""


def finished_states(which: Finished) -> frozenset[TaskState]:
    """The states whose tasks *which* deletes: terminal ones only."""
    return which.get("states", TERMINAL_STATES) & TERMINAL_STATES


class TaskStore(Protocol):
    """Durable task storage. Every method is one atomic transaction.

    Expired tasks (``now >= created_at + ttl``) are invisible to every method except
    :meth:`purge_expired`, which deletes them.
    """

    async def create(self, task: Task, now: datetime) -> tuple[Task, bool]:
        """Store *task* durably, unless its owner already has a live task with its key.

        Returns the stored task and ``True``, or the existing task with the same
        ``(owner, idempotency_key)`` and ``False``. An expired holder of the key is
        replaced. Returns only after the write is committed.
        """
        ...

    async def get(self, task_id: TaskId, now: datetime) -> Task | None:
        """The task with this id, or ``None`` if there is none or it has expired."""
        ...

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """The task and its history, oldest first, read together (one snapshot), or
        ``None`` if there is no such live task. Every write of a task appends its row in
        the same transaction, by the rule of :func:`taskloom.engine.history.entry_for`."""
        ...

    async def list(self, query: TaskQuery, now: datetime) -> StorePage:
        """A page of tasks, newest first, stable under concurrent inserts."""
        ...

    async def count(self, query: TaskQuery, now: datetime) -> int:
        """How many live tasks match *query*'s owner, states and parent (its position
        and limit do not apply)."""

    async def count_by_state(
        self, *, owner: str | None, match_owner: bool, now: datetime, at_most: int | None = None
    ) -> Mapping[TaskState, int]:
        """How many tasks are in each state (states with none are left out): all tasks, or
        only *owner*'s when *match_owner*; each count stops at *at_most* if given (so a
        count costs at most that many index reads). Tasks that expired since the last
        purge may still be counted (reading each row's expiry would cost a million rows'
        reads)."""
        ...

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: Lease | None = None
    ) -> Task:
        """Apply *mutate* to the stored task and commit the result atomically.

        The read, *mutate* and the write are one transaction that holds the task's row
        (or the whole database) locked, so concurrent writers of a task are serialised:
        each one's *mutate* sees what the previous one wrote, and a refusal (an illegal
        move) is decided against the stored state (ADR 0032). The new task must carry
        ``version + 1``. With a *fence*, it lands only while that lease is the task's
        current lease, and a write that ends the task (a terminal state) ends the lease
        in the same transaction.

        Raises:
            TaskNotFoundError: no live task has this id.
            LeaseLostError: *fence* is no longer the task's lease.
            TaskloomError: whatever *mutate* raised; nothing is written then.
        """
        ...

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to *limit* expired tasks; return how many were deleted."""
        ...

    async def delete_finished(self, **which: Unpack[Finished]) -> int:
        """Delete, with their runs, up to *limit* tasks that ended in one of *states*
        (terminal states only: an unfinished task is never deleted), among *task_ids* if
        given, and last changed before *finished_before* if given; return how many."""
        ...
