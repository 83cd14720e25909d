"""Workflow definitions: what is accepted, and the clear errors for what is not."""

import socket
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Question, Workflow
from taskloom.engine.errors import UnknownWorkflowError, WorkflowDefinitionError
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.retry import RetryPolicy


class Empty(BaseModel):
    pass


def _workflow(name: str = "flow") -> Workflow[Empty]:
    return Workflow(name, version="1", input=Empty)


def test_a_diamond_is_ordered_by_its_dependencies() -> None:
    flow = _workflow()

    @flow.node(phase="one")
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(phase="two", deps=[a])
    async def b(ctx: NodeContext[Empty]) -> int:
        return 2

    @flow.node(phase="two", deps=["a"])
    async def c(ctx: NodeContext[Empty]) -> int:
        return 3

    @flow.node(phase="three", deps=[b, c])
    async def d(ctx: NodeContext[Empty]) -> int:
        return 4

    flow.validate()
    order = flow.order()
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")
    assert flow.phases == ("one", "two", "three")
    assert flow.sinks() == ("d",)
    assert flow.result_node == "d"
    assert flow.dependents()["a"] == ("b", "c")


def test_a_shape_is_built_once_and_again_when_a_node_is_added() -> None:
    flow = _workflow()

    @flow.node(phase="one")
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    first = flow.shape()
    assert flow.shape() is first  # every run of the workflow shares one frozen shape
    assert [node.name for node in first.nodes] == ["a"]

    @flow.node(phase="two", deps=[a])
    async def b(ctx: NodeContext[Empty]) -> int:
        return 2

    second = flow.shape()
    assert second is not first
    assert [(node.name, node.deps) for node in second.nodes] == [("a", ()), ("b", ("a",))]
    assert second.phases == ("one", "two")
    assert [node.name for node in first.nodes] == ["a"]  # the earlier shape is as it was


def test_a_cycle_is_named() -> None:
    flow = _workflow()

    @flow.node(deps=["b"])
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(deps=[a])
    async def b(ctx: NodeContext[Empty]) -> int:
        return 2

    with pytest.raises(WorkflowDefinitionError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        flow.validate()


def test_an_unknown_dependency_names_the_node() -> None:
    flow = _workflow()

    @flow.node(deps=["ghost"])
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    with pytest.raises(WorkflowDefinitionError, match="node 'a': unknown dependency 'ghost'"):
        flow.validate()


def test_a_duplicate_name_is_refused() -> None:
    flow = _workflow()

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    with pytest.raises(WorkflowDefinitionError, match="node 'a': a node with this name"):

        @flow.node(name="a")
        async def other(ctx: NodeContext[Empty]) -> int:
            return 2


def test_an_output_that_cannot_be_stored_as_json_is_refused() -> None:
    flow = _workflow()
    with pytest.raises(WorkflowDefinitionError, match=r"node 'sock'.*cannot be stored as JSON"):

        @flow.node()
        async def sock(ctx: NodeContext[Empty]) -> socket.socket:
            return socket.socket()


class _Unhashable(type):
    __hash__ = None  # type: ignore[assignment]  # a class of it cannot be a dict key


@dataclass
class Point(metaclass=_Unhashable):
    x: int


def test_nodes_of_one_output_type_share_its_adapter() -> None:
    """Building and checking an output adapter is done once per type and workflow
    (``command_matrix``'s 16 slots: issue 25's start-up); a type that cannot be a key
    (its class is unhashable) gets its own each time."""
    flow = _workflow()

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int | None:
        return 1

    @flow.node()
    async def b(ctx: NodeContext[Empty]) -> int | None:
        return None

    @flow.node()
    async def c(ctx: NodeContext[Empty]) -> str:
        return ""

    @flow.node()
    async def d(ctx: NodeContext[Empty]) -> Point:
        return Point(x=1)

    @flow.node()
    async def e(ctx: NodeContext[Empty]) -> Point:
        return Point(x=2)

    nodes = flow.nodes
    assert nodes["a"].output_adapter is nodes["b"].output_adapter
    assert nodes["c"].output_adapter is not nodes["a"].output_adapter
    assert nodes["d"].output_adapter is not nodes["e"].output_adapter
    assert nodes["b"].dump_output(None) is None
    assert nodes["e"].dump_output(Point(x=2)) == {"x": 2}
    with pytest.raises(WorkflowDefinitionError, match=r"node 'again'.*cannot be stored as JSON"):

        @flow.node()
        async def again(ctx: NodeContext[Empty]) -> socket.socket:  # refused each time
            return socket.socket()


def test_types_equal_only_as_sets_get_adapters_of_their_own() -> None:
    """``int | float == float | int`` and ``Literal[1, 2] == Literal[2, 1]``, but their
    adapters differ: a node must get the one its own annotation gives (what it stores,
    the schema its workflow's shape reads)."""
    flow = _workflow()

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int | float:
        return 1

    @flow.node()
    async def b(ctx: NodeContext[Empty]) -> float | int:
        return 1

    @flow.node()
    async def c(ctx: NodeContext[Empty]) -> list[Literal[1, 2]]:
        return [1]

    @flow.node()
    async def d(ctx: NodeContext[Empty]) -> list[Literal[2, 1]]:
        return [1]

    @flow.node()
    async def e(ctx: NodeContext[Empty]) -> list[Literal[2, 1]]:
        return [2]

    nodes = flow.nodes
    assert [type(nodes[name].dump_output("1")) for name in "ab"] == [int, float]
    assert nodes["c"].output_adapter.json_schema()["items"]["enum"] == [1, 2]
    assert nodes["d"].output_adapter.json_schema()["items"]["enum"] == [2, 1]
    assert nodes["d"].output_adapter is nodes["e"].output_adapter


def test_a_node_needs_a_return_annotation_and_must_be_async() -> None:
    flow = _workflow()
    with pytest.raises(WorkflowDefinitionError, match="annotate the return type"):

        @flow.node()
        async def bare(ctx):  # type: ignore[no-untyped-def]  # the mistake under test
            return 1

    def sync(ctx: NodeContext[Empty]) -> int:
        return 1

    with pytest.raises(WorkflowDefinitionError, match="must be an async function"):
        flow.node()(sync)  # type: ignore[arg-type]  # the mistake under test


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "has space"}, "not a valid tool name"),
        ({"name": "ok", "version": ""}, "needs a version"),
        ({"name": "ok", "input": dict}, "input must be a pydantic model"),
        ({"name": "ok", "max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_workflow_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"version": "1", "input": Empty, **kwargs}
    with pytest.raises(WorkflowDefinitionError, match=message):
        Workflow(**arguments)


def test_unknown_phase_and_bad_timeout_are_refused() -> None:
    flow = Workflow("flow", version="1", input=Empty, phases=["one"])
    with pytest.raises(WorkflowDefinitionError, match="unknown phase 'two'"):

        @flow.node(phase="two")
        async def a(ctx: NodeContext[Empty]) -> int:
            return 1

    with pytest.raises(WorkflowDefinitionError, match="timeout must be positive"):

        @flow.node(phase="one", timeout=0)
        async def b(ctx: NodeContext[Empty]) -> int:
            return 1


def test_an_empty_workflow_and_an_unknown_result_node_are_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="has no nodes"):
        _workflow().validate()
    flow = Workflow("flow", version="1", input=Empty, result="ghost")

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    with pytest.raises(WorkflowDefinitionError, match="result node 'ghost'"):
        flow.validate()


def test_several_sinks_make_a_result_keyed_by_node() -> None:
    flow = _workflow()

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node()
    async def b(ctx: NodeContext[Empty]) -> str:
        return "x"

    assert flow.result_node is None
    assert flow.build_result({"a": 1, "b": "x"}) == {"a": 1, "b": "x"}


def test_the_registry_validates_and_finds_workflows() -> None:
    registry = WorkflowRegistry()
    registry.load_module("taskloom.workflows.countdown")
    assert "countdown" in registry
    assert registry["countdown"].version == "1"
    with pytest.raises(UnknownWorkflowError, match="no workflow is named 'nope'"):
        registry["nope"]
    with pytest.raises(WorkflowDefinitionError, match="cannot import workflow module"):
        registry.load_module("no.such.module")
    with pytest.raises(WorkflowDefinitionError, match="defines no workflow"):
        registry.load_module("taskloom.engine.retry")
    with pytest.raises(WorkflowDefinitionError, match="has no nodes"):
        registry.register(_workflow("empty"))


def test_retry_delays_grow_exponentially_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=6, initial_delay_s=1, backoff=2, max_delay_s=5, jitter=False)
    assert [policy.delay_after(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    assert policy.allows_another(5, RuntimeError())
    assert not policy.allows_another(6, RuntimeError())


def test_jitter_keeps_half_the_delay_fixed_and_spreads_the_rest() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay_s=2, backoff=2, max_delay_s=60)
    delays = [policy.delay_after(2) for _ in range(200)]
    assert all(2.0 <= delay <= 4.0 for delay in delays)
    assert len(set(delays)) > 100


def test_only_the_listed_exceptions_earn_a_retry() -> None:
    policy = RetryPolicy(max_attempts=3, retry_on=(ConnectionError,))
    assert policy.allows_another(1, ConnectionResetError())
    assert not policy.allows_another(1, ValueError())
    assert policy.allows_another(1, None)  # a timeout


class _Name(BaseModel):
    name: str


def test_questions_need_unique_valid_keys_and_a_model_answer() -> None:
    with pytest.raises(WorkflowDefinitionError, match="question 'q': asked twice"):
        Workflow("w", version="1", input=Empty, asks=[Question("q", "?", _Name)] * 2)
    with pytest.raises(WorkflowDefinitionError, match="question 'a#1': not a valid question key"):
        Workflow("w", version="1", input=Empty, asks=[Question("a#1", "?", _Name)])
    with pytest.raises(WorkflowDefinitionError, match="answer must be a pydantic model"):
        Workflow("w", version="1", input=Empty, asks=[Question("q", "?", dict)])


def test_answers_are_parsed_against_their_question_and_read_typed() -> None:
    name = Question("user_name", "Your name?", _Name)
    flow = Workflow("w", version="1", input=Empty, asks=[name])
    assert flow.parse_answers({"user_name": {"name": "Ada"}}) == {"user_name": {"name": "Ada"}}
    with pytest.raises(ValueError, match="answer to 'user_name': name: Field required"):
        flow.parse_answers({"user_name": {}})
    with pytest.raises(ValueError, match="'other' is not a question of workflow 'w'"):
        flow.parse_answers({"other": {"name": "Ada"}})
    assert name.requested_schema == _Name.model_json_schema()
