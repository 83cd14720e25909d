"""The curated public surface: what `import taskloom` offers, pinned by a snapshot."""

import importlib

import pytest

import taskloom

EXPECTED_TOP_LEVEL = {
    "ANY_OWNER",
    "DEFAULT",
    "DependencyFailedError",
    "ChildFailedError",
    "Engine",
    "TaskloomSettings",
    "durable",
    "durable_tasks",
    "open_engine",
    "Node",
    "NodeContext",
    "MapContext",
    "MapResult",
    "ItemFailure",
    "Question",
    "RetryPolicy",
    "Worker",
    "WorkerSettings",
    "Workflow",
    "WorkflowDefinitionError",
    "WorkflowRegistry",
    "settings_of",
    "check_cancelled",
    "exposure_of",
    "submit",
    "IdempotencyConflictError",
    "IllegalTransitionError",
    "InputRequest",
    "InvalidCursorError",
    "InvalidRequestError",
    "MissingExtraError",
    "PersistenceError",
    "Progress",
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
    "__version__",
}


def test_the_top_level_exports_match_the_snapshot() -> None:
    assert set(taskloom.__all__) == EXPECTED_TOP_LEVEL


@pytest.mark.parametrize(
    "module",
    ["taskloom", "taskloom.engine", "taskloom.testing", "taskloom.persistence.sqlite"],
)
def test_every_exported_name_exists_and_all_is_a_tuple(module: str) -> None:
    imported = importlib.import_module(module)
    exported = imported.__all__
    assert isinstance(exported, tuple)
    for name in exported:
        assert hasattr(imported, name), f"{module}.{name}"


def test_every_engine_error_derives_from_the_one_root() -> None:
    from taskloom import engine

    errors = [
        getattr(engine, name)
        for name in engine.__all__
        if isinstance(getattr(engine, name), type) and name.endswith("Error")
    ]
    assert len(errors) > 10
    assert all(issubclass(error, taskloom.TaskloomError) for error in errors)
