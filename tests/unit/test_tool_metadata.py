"""What a model reads about a workflow's tool: its description and its input schema
(issue 16, ADR 0022)."""

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from taskloom import InvalidRequestError, Workflow, WorkflowDefinitionError
from taskloom.engine.dag import NodeContext
from taskloom.engine.manager import TaskManager
from taskloom.engine.submit import submit
from taskloom.server.calls import tool_for
from taskloom.testing import InMemoryTaskStore


class Bare(BaseModel):
    start: int = 3


class Documented(BaseModel):
    """Count down from `start`."""

    start: int = 3


class InheritsTheDoc(Documented):
    pass


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")

    start: int = 3


def _workflow(model: type[BaseModel], **options: Any) -> Workflow[Any]:
    workflow: Workflow[Any] = Workflow("flow", version="1", input=model, **options)

    @workflow.node()
    async def only(ctx: NodeContext[Any]) -> int:
        return 0

    return workflow


@pytest.mark.parametrize(
    ("model", "options", "description"),
    [
        (Bare, {}, "Run the flow workflow."),
        (Documented, {}, "Count down from `start`."),
        (InheritsTheDoc, {}, "Run the flow workflow."),
        (Documented, {"description": "Chosen words."}, "Chosen words."),
    ],
    ids=["generated", "model's own", "inherited doc ignored", "workflow's"],
)
def test_the_description_is_never_an_inherited_docstring(
    model: type[BaseModel], options: dict[str, Any], description: str
) -> None:
    tool = tool_for(_workflow(model, **options))
    assert tool.description == description
    assert "Usage Documentation" not in (tool.description or "")


def test_the_schema_refuses_unknown_keys_by_default() -> None:
    workflow = _workflow(Bare)
    schema = tool_for(workflow).input_schema
    assert schema["additionalProperties"] is False
    assert schema["title"] == "Bare"
    assert "additionalProperties" not in Bare.model_json_schema()  # the user's model is as it was


@pytest.mark.parametrize(
    ("model", "options", "kept"),
    [
        (Bare, {"extra_inputs": "ignore"}, {"start": 3}),
        (Bare, {"extra_inputs": "allow"}, {"start": 3, "strat": 5}),
        (Lenient, {}, {"start": 3, "strat": 5}),
    ],
    ids=["workflow ignores", "workflow allows", "model allows"],
)
async def test_a_workflow_or_its_model_can_let_unknown_keys_in(
    model: type[BaseModel], options: dict[str, Any], kept: dict[str, Any]
) -> None:
    workflow = _workflow(model, **options)
    assert tool_for(workflow).input_schema.get("additionalProperties", True) is True
    task = await submit(TaskManager(InMemoryTaskStore()), workflow, {"strat": 5})
    assert task.arguments == kept


def test_a_wrong_extra_inputs_value_is_a_definition_error() -> None:
    with pytest.raises(WorkflowDefinitionError, match="extra_inputs is 'forbid', 'ignore'"):
        Workflow("flow", version="1", input=Bare, extra_inputs="forbidden")  # type: ignore[arg-type]


async def test_an_unknown_key_is_refused_by_name() -> None:
    manager = TaskManager(InMemoryTaskStore())
    with pytest.raises(InvalidRequestError) as raised:
        await submit(manager, _workflow(Bare), {"strat": 5})
    assert str(raised.value) == (
        "invalid arguments for flow: unknown argument 'strat' (it takes: start)"
    )
    assert (await manager.list()).tasks == ()


def test_runs_of_stored_arguments_parse_as_before() -> None:
    """A stored task's arguments are re-read leniently (e.g. a computed field in a dump)."""
    workflow = _workflow(Bare)
    assert workflow.parse_input({"start": 1, "computed": 2}) == Bare(start=1)
    assert isinstance(workflow.parse_arguments({"start": 1}), Bare)


def test_a_workflow_tool_is_built_once_and_per_workflow() -> None:
    """``tools/list`` reuses each workflow's tool (its schemas cost milliseconds to
    build, ADR 0041); another workflow of the same name gets its own."""
    first, second = _workflow(Documented), _workflow(Bare)
    assert tool_for(first) is tool_for(first)
    assert tool_for(second) is not tool_for(first)
    assert tool_for(second).input_schema["properties"] == {
        "start": {"default": 3, "title": "Start", "type": "integer"}
    }
