"""The domain: tasks, their states and transitions, errors, ports and the TaskManager."""

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
