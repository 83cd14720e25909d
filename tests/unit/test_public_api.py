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
    [
        "taskloom",
        "taskloom.engine",
        "taskloom.engine.observe",
        "taskloom.testing",
        "taskloom.persistence.sqlite",
    ],
)
def test_every_exported_name_exists_and_all_is_a_tuple(module: str) -> None:
    imported = importlib.import_module(module)
    exported = imported.__all__
    assert isinstance(exported, tuple)
    for name in exported:
        assert hasattr(imported, name), f"{module}.{name}"


@pytest.mark.parametrize("module", ["taskloom", "taskloom.engine"])
def test_the_lazy_loading_helper_is_not_a_listed_name(module: str) -> None:
    assert "LazyNames" not in dir(importlib.import_module(module))


def test_the_observer_port_exports_the_types_an_observer_is_written_with() -> None:
    """``open_engine(observer=...)`` takes an ``Observer``; docs/observability.md shows
    one written with these (``AttemptEnd``: how an attempt ended, ADR 0045)."""
    from taskloom.engine import observe

    assert set(observe.__all__) == {
        "AttemptEnd",
        "AttemptInfo",
        "NullObserver",
        "Observer",
        "Observers",
        "RunInfo",
    }


def test_every_engine_error_derives_from_the_one_root() -> None:
    from taskloom import engine

    errors = [
        getattr(engine, name)
        for name in engine.__all__
        if isinstance(getattr(engine, name), type) and name.endswith("Error")
    ]
    assert len(errors) > 10
    assert all(issubclass(error, taskloom.TaskloomError) for error in errors)
