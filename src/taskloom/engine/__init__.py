"""The domain: tasks, their states and transitions, errors, ports and the TaskManager."""

from typing import TYPE_CHECKING, Any

from taskloom.engine.lazy import LazyNames as _LazyNames

if TYPE_CHECKING:  # what the names are, for type checkers; loaded on first use
    from taskloom.engine.clock import SystemClock
    from taskloom.engine.errors import (
        ConcurrencyError,
        CorruptDatabaseError,
        DatabaseBusyError,
        DatabaseUnavailableError,
        ForeignDatabaseError,
        IdempotencyConflictError,
        IllegalTransitionError,
        InputNotRequestedError,
        InvalidCursorError,
        InvalidRequestError,
        MissingExtraError,
        PersistenceError,
        SchemaVersionError,
        StoreClosedError,
        TaskloomError,
        TaskNotFoundError,
        TaskStateError,
        WorkflowDefinitionError,
    )
    from taskloom.engine.events import ChangeFeed, TaskSubscription
    from taskloom.engine.manager import ANY_OWNER, DEFAULT, TaskManager, TaskManagerSettings
    from taskloom.engine.models import InputRequest, Progress, Task, TaskFailure, TaskId, TaskPage
    from taskloom.engine.ports import Clock, TaskStore
    from taskloom.engine.states import TERMINAL_STATES, TRANSITIONS, TaskState, is_terminal

_LAZY: dict[str, str] = {
    "SystemClock": "taskloom.engine.clock",
    "ConcurrencyError": "taskloom.engine.errors",
    "CorruptDatabaseError": "taskloom.engine.errors",
    "DatabaseBusyError": "taskloom.engine.errors",
    "DatabaseUnavailableError": "taskloom.engine.errors",
    "ForeignDatabaseError": "taskloom.engine.errors",
    "IdempotencyConflictError": "taskloom.engine.errors",
    "IllegalTransitionError": "taskloom.engine.errors",
    "InputNotRequestedError": "taskloom.engine.errors",
    "InvalidCursorError": "taskloom.engine.errors",
    "InvalidRequestError": "taskloom.engine.errors",
    "MissingExtraError": "taskloom.engine.errors",
    "PersistenceError": "taskloom.engine.errors",
    "SchemaVersionError": "taskloom.engine.errors",
    "StoreClosedError": "taskloom.engine.errors",
    "TaskloomError": "taskloom.engine.errors",
    "TaskNotFoundError": "taskloom.engine.errors",
    "TaskStateError": "taskloom.engine.errors",
    "WorkflowDefinitionError": "taskloom.engine.errors",
    "ChangeFeed": "taskloom.engine.events",
    "TaskSubscription": "taskloom.engine.events",
    "ANY_OWNER": "taskloom.engine.manager",
    "DEFAULT": "taskloom.engine.manager",
    "TaskManager": "taskloom.engine.manager",
    "TaskManagerSettings": "taskloom.engine.manager",
    "InputRequest": "taskloom.engine.models",
    "Progress": "taskloom.engine.models",
    "Task": "taskloom.engine.models",
    "TaskFailure": "taskloom.engine.models",
    "TaskId": "taskloom.engine.models",
    "TaskPage": "taskloom.engine.models",
    "Clock": "taskloom.engine.ports",
    "TaskStore": "taskloom.engine.ports",
    "TERMINAL_STATES": "taskloom.engine.states",
    "TRANSITIONS": "taskloom.engine.states",
    "TaskState": "taskloom.engine.states",
    "is_terminal": "taskloom.engine.states",
}
"""Each public name's module, imported on first use: ``taskloom.engine.errors`` (which the
command line needs) then loads no pydantic model."""

__all__ = (
    "ANY_OWNER",
    "DEFAULT",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "ChangeFeed",
    "Clock",
    "ConcurrencyError",
    "CorruptDatabaseError",
    "DatabaseBusyError",
    "DatabaseUnavailableError",
    "ForeignDatabaseError",
    "IdempotencyConflictError",
    "IllegalTransitionError",
    "InputNotRequestedError",
    "InputRequest",
    "InvalidCursorError",
    "InvalidRequestError",
    "MissingExtraError",
    "PersistenceError",
    "Progress",
    "SchemaVersionError",
    "StoreClosedError",
    "SystemClock",
    "Task",
    "TaskFailure",
    "TaskId",
    "TaskManager",
    "TaskManagerSettings",
    "TaskNotFoundError",
    "TaskPage",
    "TaskState",
    "TaskStateError",
    "TaskStore",
    "TaskSubscription",
    "TaskloomError",
    "WorkflowDefinitionError",
    "is_terminal",
)


_NAMES = _LazyNames(__name__, _LAZY, __all__)


def __getattr__(name: str) -> Any:
    return _NAMES.load(name)


def __dir__() -> list[str]:
    return _NAMES.names()
