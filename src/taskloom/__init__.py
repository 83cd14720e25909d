"""taskloom: durable tasks for the Model Context Protocol."""

from typing import TYPE_CHECKING, Any

from taskloom.engine import (
    ANY_OWNER,
    DEFAULT,
    IdempotencyConflictError,
    IllegalTransitionError,
    InputRequest,
    InvalidCursorError,
    InvalidRequestError,
    MissingExtraError,
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
from taskloom.engine.children import ChildFailedError
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
from taskloom.engine.durable import durable
from taskloom.engine.fanout import ItemFailure, MapResult
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings

if TYPE_CHECKING:
    from taskloom.bootstrap import Engine, durable_tasks, open_engine
    from taskloom.config import TaskloomSettings

__version__ = "0.1.0.dev0"

_COMPOSITION: dict[str, str] = {
    "Engine": "taskloom.bootstrap",
    "durable_tasks": "taskloom.bootstrap",
    "open_engine": "taskloom.bootstrap",
    "TaskloomSettings": "taskloom.config",
}
"""Names loaded on first use, so that ``import taskloom`` loads no database driver."""

__all__ = (
    "ANY_OWNER",
    "DEFAULT",
    "ChildFailedError",
    "DependencyFailedError",
    "Engine",
    "IdempotencyConflictError",
    "IllegalTransitionError",
    "InputRequest",
    "InvalidCursorError",
    "InvalidRequestError",
    "ItemFailure",
    "MapContext",
    "MapResult",
    "MissingExtraError",
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
    "TaskloomSettings",
    "Worker",
    "WorkerSettings",
    "Workflow",
    "WorkflowDefinitionError",
    "WorkflowRegistry",
    "__version__",
    "check_cancelled",
    "durable",
    "durable_tasks",
    "exposure_of",
    "open_engine",
    "settings_of",
    "submit",
)


def __getattr__(name: str) -> Any:
    module = _COMPOSITION.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
