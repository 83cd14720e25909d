"""taskloom: durable tasks for the Model Context Protocol."""

from typing import TYPE_CHECKING, Any

from taskloom.engine.lazy import LazyNames as _LazyNames

if TYPE_CHECKING:  # what the names are, for type checkers; loaded on first use
    from taskloom.bootstrap import Engine, durable_tasks, open_engine
    from taskloom.config import TaskloomSettings
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

__version__ = "0.1.0.dev0"

_COMPOSITION: dict[str, str] = {
    "Engine": "taskloom.bootstrap",
    "durable_tasks": "taskloom.bootstrap",
    "open_engine": "taskloom.bootstrap",
    "TaskloomSettings": "taskloom.config",
}
"""Names whose modules load a database driver's wiring (``import taskloom`` loads none)."""

_ENGINE: dict[str, str] = {
    "ANY_OWNER": "taskloom.engine",
    "DEFAULT": "taskloom.engine",
    "IdempotencyConflictError": "taskloom.engine",
    "IllegalTransitionError": "taskloom.engine",
    "InputRequest": "taskloom.engine",
    "InvalidCursorError": "taskloom.engine",
    "InvalidRequestError": "taskloom.engine",
    "MissingExtraError": "taskloom.engine",
    "PersistenceError": "taskloom.engine",
    "Progress": "taskloom.engine",
    "Task": "taskloom.engine",
    "TaskFailure": "taskloom.engine",
    "TaskId": "taskloom.engine",
    "TaskloomError": "taskloom.engine",
    "TaskManager": "taskloom.engine",
    "TaskManagerSettings": "taskloom.engine",
    "TaskNotFoundError": "taskloom.engine",
    "TaskPage": "taskloom.engine",
    "TaskState": "taskloom.engine",
    "TaskStateError": "taskloom.engine",
    "TaskStore": "taskloom.engine",
    "WorkflowDefinitionError": "taskloom.engine",
    "ChildFailedError": "taskloom.engine.children",
    "DependencyFailedError": "taskloom.engine.dag",
    "MapContext": "taskloom.engine.dag",
    "Node": "taskloom.engine.dag",
    "NodeContext": "taskloom.engine.dag",
    "Question": "taskloom.engine.dag",
    "Workflow": "taskloom.engine.dag",
    "check_cancelled": "taskloom.engine.dag",
    "exposure_of": "taskloom.engine.dag",
    "settings_of": "taskloom.engine.dag",
    "durable": "taskloom.engine.durable",
    "ItemFailure": "taskloom.engine.fanout",
    "MapResult": "taskloom.engine.fanout",
    "WorkflowRegistry": "taskloom.engine.registry",
    "RetryPolicy": "taskloom.engine.retry",
    "submit": "taskloom.engine.submit",
    "Worker": "taskloom.engine.worker",
    "WorkerSettings": "taskloom.engine.worker",
}
"""The engine's public names, also loaded on first use: ``python -m taskloom --help``
then imports no pydantic model (issue 25: the command answers in at most 0.25 s)."""

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


_NAMES = _LazyNames(__name__, {**_COMPOSITION, **_ENGINE}, __all__)


def __getattr__(name: str) -> Any:
    return _NAMES.load(name)


def __dir__() -> list[str]:
    return _NAMES.names()
