"""Operator settings of a workflow: declared, configured, seen by validators and nodes."""

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from taskloom.bootstrap import load_workflows
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.engine.dag import NodeContext, Workflow, settings_of
from taskloom.engine.errors import InvalidRequestError, WorkflowDefinitionError
from taskloom.engine.manager import TaskManager
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import InMemoryTaskStore
from taskloom.workflows.command_matrix import CommandMatrixSettings
from taskloom.workflows.repo_audit import RepoAuditSettings


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    most: int = 0


class Ask(BaseModel):
    amount: int

    @field_validator("amount")
    @classmethod
    def _within(cls, amount: int, info: ValidationInfo) -> int:
        most = settings_of(info, Limits).most
        if amount > most:
            raise ValueError(f"at most {most}")
        return amount


def _flow() -> Workflow[Ask]:
    flow = Workflow("limited", version="1", input=Ask, settings=Limits)

    @flow.node()
    async def spend(ctx: NodeContext[Ask]) -> int:
        assert isinstance(ctx.settings, Limits)
        return ctx.settings.most - ctx.input.amount

    return flow


def test_configure_returns_a_configured_copy_and_leaves_the_definition_alone() -> None:
    flow = _flow()
    configured = flow.configure({"most": 10})
    assert configured.settings == Limits(most=10)
    assert flow.settings == Limits(most=0)
    assert configured.nodes.keys() == flow.nodes.keys()
    assert configured.parse_input({"amount": 10}).amount == 10
    with pytest.raises(ValidationError, match="at most 0"):
        flow.parse_input({"amount": 1})


def test_validators_outside_taskloom_see_the_defaults() -> None:
    with pytest.raises(ValidationError, match="at most 0"):
        Ask.model_validate({"amount": 1})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"most": "many"}, "workflow 'limited': invalid settings: most: Input should be a valid"),
        ({"least": 1}, "invalid settings: least: Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_refused_with_the_field_named(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(WorkflowDefinitionError, match=message):
        _flow().configure(values)


def test_a_settings_model_must_be_a_model_with_safe_defaults() -> None:
    class Required(BaseModel):
        token: str

    with pytest.raises(WorkflowDefinitionError, match="settings must be a pydantic model"):
        Workflow("x", version="1", input=Ask, settings=dict)  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="invalid settings: token: Field required"):
        Workflow("x", version="1", input=Ask, settings=Required)
    with pytest.raises(WorkflowDefinitionError, match="'plain' takes no settings"):
        Workflow("plain", version="1", input=Ask).configure({})


async def test_submit_refuses_what_the_settings_forbid_and_nodes_read_them() -> None:
    store = InMemoryTaskStore()
    manager = TaskManager(store)
    flow = _flow().configure({"most": 5})
    with pytest.raises(
        InvalidRequestError, match=r"invalid arguments for limited: amount: .*at most 5"
    ):
        await submit(manager, flow, {"amount": 6})
    task = await submit(manager, flow, {"amount": 2})
    worker = Worker(manager, {flow.name: flow}, settings=WorkerSettings(poll_s=0.05))
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        with anyio.fail_after(10):
            done = await manager.wait_until_terminal(task.id)
        task_group.cancel_scope.cancel()
    assert (done.state, done.result) == (TaskState.COMPLETED, 3)


def test_the_registry_and_the_composition_root_configure_by_name(tmp_path: Path) -> None:
    registry = WorkflowRegistry({"limited": _flow()})
    assert registry.configure("limited", {"most": 3}).settings == Limits(most=3)
    assert registry["limited"].settings == Limits(most=3)
    settings = TaskloomSettings(
        load_entry_points=False,
        workflow_settings={"command_matrix": {"allowed_programs": ["make"]}},
    )
    loaded = load_workflows(settings)
    assert set(loaded) == {"countdown", "repo_audit", "command_matrix"}
    assert loaded["command_matrix"].settings == CommandMatrixSettings(allowed_programs=("make",))
    with pytest.raises(WorkflowDefinitionError, match="settings are given for 'nope'"):
        load_workflows(TaskloomSettings(load_entry_points=False, workflow_settings={"nope": {}}))
    with pytest.raises(WorkflowDefinitionError, match=r"allowed_programs.*a path must be absolute"):
        load_workflows(
            TaskloomSettings(
                load_entry_points=False,
                workflow_settings={"command_matrix": {"allowed_programs": ["bin/make"]}},
            )
        )
    assert "taskloom.workflows.command_matrix" in BUILTIN_WORKFLOWS


def test_settings_defaults_depend_on_who_can_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    here = (str(tmp_path.resolve()),)
    local = load_workflows(TaskloomSettings(load_entry_points=False))
    network = load_workflows(TaskloomSettings(load_entry_points=False, exposure="network"))
    assert local["repo_audit"].settings == RepoAuditSettings(allowed_roots=here)
    assert network["repo_audit"].settings == RepoAuditSettings(allowed_roots=())
    given = {"repo_audit": {"allowed_roots": [str(tmp_path / "x" / "..")]}}
    configured = load_workflows(
        TaskloomSettings(load_entry_points=False, exposure="network", workflow_settings=given)
    )
    assert configured["repo_audit"].settings == RepoAuditSettings(allowed_roots=here)
    monkeypatch.chdir("/")  # a host that starts its servers in / grants nothing by default
    assert load_workflows(TaskloomSettings(load_entry_points=False))[
        "repo_audit"
    ].settings == RepoAuditSettings(allowed_roots=())
