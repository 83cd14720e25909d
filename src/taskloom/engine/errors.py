"""The engine's exceptions: one root, typed arguments, messages built here."""

import importlib
from collections.abc import Sequence
from typing import Any


class TaskloomError(Exception):
    """Root of every error taskloom raises on purpose."""


class TaskNotFoundError(TaskloomError, LookupError):
    """No visible task has this id (it never existed, expired, or belongs to someone else)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task not found: {task_id}")
        self.task_id = task_id


class TaskStateError(TaskloomError):
    """The operation does not fit the task's current state."""


class IllegalTransitionError(TaskStateError):
    """A state change that the transition table does not allow."""

    def __init__(self, *, task_id: str, current: Any, target: Any) -> None:
        super().__init__(f"task {task_id} cannot move from {current!s} to {target!s}")
        self.task_id = task_id
        self.current = current
        self.target = target


class ConcurrencyError(TaskloomError):
    """A write kept losing a race it could not settle by waiting (e.g. an idempotency key
    that changed hands repeatedly); trying again later may succeed."""


class IdempotencyConflictError(TaskloomError):
    """An idempotency key was reused with a different tool or different arguments."""

    def __init__(self, *, key: str, existing_task_id: str) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for task {existing_task_id} "
            "with different arguments"
        )
        self.key = key
        self.existing_task_id = existing_task_id


class QuotaExceededError(TaskloomError):
    """A principal already has as many unfinished tasks as it may have."""

    def __init__(self, *, owner: str, limit: int) -> None:
        super().__init__(
            f"too many unfinished tasks: a principal may have {limit} queued, running or "
            "waiting for input; wait for some to finish or cancel some"
        )
        self.owner = owner
        self.limit = limit


class InvalidRequestError(TaskloomError, ValueError):
    """A caller passed a value the engine cannot accept (bad cursor, bad limit, bad TTL...)."""


class InvalidCursorError(InvalidRequestError):
    """A list cursor that this engine did not issue, or that is damaged."""

    def __init__(self, cursor: str) -> None:
        shown = cursor if len(cursor) <= 40 else cursor[:37] + "..."
        super().__init__(f"invalid cursor: {shown!r}")
        self.cursor = cursor


class InputNotRequestedError(InvalidRequestError):
    """An answer for an input request that is not pending on the task."""

    def __init__(self, *, task_id: str, key: str) -> None:
        super().__init__(f"task {task_id} has no pending input request {key!r}")
        self.task_id = task_id
        self.key = key


class WorkflowError(TaskloomError):
    """A problem with a workflow rather than with one task."""


class WorkflowDefinitionError(WorkflowError):
    """A workflow definition is invalid: the message names the workflow and the node."""


class UnknownWorkflowError(WorkflowError, KeyError):
    """No registered workflow has this name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown workflow"


class LeaseLostError(ConcurrencyError):
    """A worker's lease on a run was taken over or ended; its writes no longer land."""


class InvalidAnswerError(InvalidRequestError):
    """An answer that does not match the question's schema; the task keeps waiting."""

    def __init__(self, *, task_id: str, key: str, problems: list[str]) -> None:
        super().__init__(
            f"the answer to {key!r} on task {task_id} does not match the requested schema: "
            + "; ".join(problems[:3])
        )
        self.task_id = task_id
        self.key = key
        self.problems = problems


class PersistenceError(TaskloomError):
    """The store failed; the driver's exception is kept as ``__cause__``."""


class StoreUnavailableError(PersistenceError):
    """The store did not answer within its wait (ADR 0038): the database is down, locked
    by another process, or its disk is full. Nothing was written; the same request may
    succeed later, after about :attr:`retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: float = 5.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """When a retry makes sense, in seconds (a hint: the store's wait)."""


class DatabaseBusyError(StoreUnavailableError):
    """The database stayed locked by another writer past every retry."""


class DatabaseUnavailableError(StoreUnavailableError):
    """The database server cannot be reached, or refused the connection (address, password)."""


class OutcomeUnknownError(StoreUnavailableError):
    """The connection to the database broke while a write was committing: the write may
    or may not have landed. Not retried by the store; a caller may check, or repeat a
    request that carries an idempotency key."""


class DiskFullError(StoreUnavailableError):
    """The database's disk (or its quota) is full: nothing more can be written until an
    operator frees space."""


class CorruptDatabaseError(PersistenceError):
    """The database file is damaged or is not a database at all."""


class ForeignDatabaseError(PersistenceError):
    """The database file belongs to some other application."""


class SchemaVersionError(PersistenceError):
    """The stored schema is newer than this taskloom understands."""


class StoreClosedError(PersistenceError):
    """The store was used after it was closed."""


class WaitOverError(TaskStateError):
    """A run tried to hand itself back to wait, but what a node of it waits for has
    arrived meanwhile (an answer, a timer's time): nothing was written; the run goes on."""


class MissingExtraError(TaskloomError, ImportError):
    """A feature needs an optional part of taskloom that is not installed; the message
    names the extra to install (e.g. ``pip install 'taskloom[postgres]'``)."""

    def __init__(self, message: str, *, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


def require_extra(extra: str, modules: Sequence[str], message: str) -> None:
    """Import *modules*, or raise :class:`MissingExtraError` naming *extra*.

    A ``ModuleNotFoundError`` of one of *modules* (its ``__cause__``) becomes the one
    line *message*; one raised inside them for another module is not hidden.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in modules:
                raise
            raise MissingExtraError(message, extra=extra) from error
