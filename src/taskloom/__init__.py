"""taskloom: durable tasks for the Model Context Protocol."""

from taskloom.engine import (
    ANY_OWNER,
    DEFAULT,
    IdempotencyConflictError,
    IllegalTransitionError,
    InputRequest,
    InvalidCursorError,
    InvalidRequestError,
    PersistenceError,
    Progress,
    Task,
    TaskFailure,
    TaskId,
    TaskloomError,
    TaskManager,
    TaskManagerSettings,
    TaskNotFoundError,
    TaskPage,
    TaskState,
    TaskStateError,
    TaskStore,
    WorkflowDefinitionError,
)
from taskloom.engine.dag import (
    DependencyFailedError,
    MapContext,
    Node,
    NodeContext,
    Question,
    Workflow,
    check_cancelled,
    exposure_of,
    settings_of,
)
from taskloom.engine.fanout import ItemFailure, MapResult
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings

__version__ = "0.1.0.dev0"

__all__ = (
    "ANY_OWNER",
    "DEFAULT",
    "DependencyFailedError",
    "IdempotencyConflictError",
    "IllegalTransitionError",
    "InputRequest",
    "InvalidCursorError",
    "InvalidRequestError",
    "ItemFailure",
    "MapContext",
    "MapResult",
    "Node",
    "NodeContext",
    "PersistenceError",
    "Progress",
    "Question",
    "RetryPolicy",
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
    "TaskloomError",
    "Worker",
    "WorkerSettings",
    "Workflow",
    "WorkflowDefinitionError",
    "WorkflowRegistry",
    "__version__",
    "check_cancelled",
    "exposure_of",
    "settings_of",
    "submit",
)
