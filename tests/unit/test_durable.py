"""``durable``: one ``async def`` as a one-node workflow."""

import pytest
from pydantic import BaseModel, ValidationError

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.durable import durable
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.retry import RetryPolicy


class Report(BaseModel):
    lines: int


@durable(retry=RetryPolicy(max_attempts=4), timeout=60)
async def slow_report(path: str, limit: int = 10, ctx: NodeContext | None = None) -> Report:  # type: ignore[type-arg]
    """Count the lines of a file, slowly."""
    return Report(lines=limit)


def test_the_input_model_is_the_signature_without_the_context() -> None:
    schema = slow_report.input_schema()
    assert set(schema["properties"]) == {"path", "limit"}
    assert schema["required"] == ["path"]
    assert schema["properties"]["limit"]["default"] == 10


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ValidationError):
        slow_report.parse_arguments({"path": "a", "lines": 3})
    assert slow_report.input_schema().get("additionalProperties") is False


def test_the_docstring_is_the_description_and_the_function_names_it() -> None:
    assert slow_report.name == "slow_report"
    assert slow_report.description == "Count the lines of a file, slowly."
    assert slow_report.output_model is Report


def test_it_is_one_node_with_the_retry_and_timeout_given() -> None:
    (node,) = slow_report.nodes.values()
    assert node.retry.max_attempts == 4
    assert node.timeout_s == 60


def test_a_function_that_is_not_async_is_refused() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(WorkflowDefinitionError, match="async"):
        durable()(plain)  # type: ignore[arg-type]


def test_an_unannotated_parameter_is_refused() -> None:
    async def loose(x) -> int:  # type: ignore[no-untyped-def]
        return 1

    with pytest.raises(WorkflowDefinitionError, match="annotate"):
        durable()(loose)


@durable
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


async def shout_function(text: str) -> str:
    """Say it louder."""
    return text.upper()


def test_bare_durable_is_the_same_as_durable_with_no_options() -> None:
    workflow: Workflow[BaseModel] = shout  # typed as a Workflow for mypy, not a decorator
    with_parentheses = durable()(shout_function)
    assert workflow.name == "shout"
    assert workflow.description == "Say it louder."
    assert workflow.input_schema()["properties"] == with_parentheses.input_schema()["properties"]
    (node,) = workflow.nodes.values()
    (same,) = with_parentheses.nodes.values()
    assert (node.retry, node.timeout_s) == (same.retry, same.timeout_s)


def test_bare_durable_refuses_what_durable_refuses() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(WorkflowDefinitionError, match="must be an async function"):
        durable(plain)  # type: ignore[arg-type]  # mypy refuses it as well
