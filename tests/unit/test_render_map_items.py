"""`tasks show` rows for a run with thousands of map items (ADR 0024). How fast they are
made is not asserted here (bench/ measures speed); the order and the pairing are."""

from datetime import UTC, datetime

from taskloom.commands.render import node_rows
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import AttemptOutcome, NodeAttempt, NodeRun, NodeState
from taskloom.engine.states import TaskState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TASK = Task(
    id=TaskId("t"),
    name="shape",
    arguments={},
    owner=None,
    state=TaskState.RUNNING,
    created_at=NOW,
    updated_at=NOW,
    ttl_ms=None,
    version=1,
)


def test_items_are_listed_in_item_order_each_with_its_attempts() -> None:
    count = 10_000
    keys = [f"analyse[{index}]" for index in reversed(range(count))]  # as a store may
    nodes = {
        key: NodeRun(node=key, state=NodeState.COMPLETED, attempt=1, updated_at=NOW) for key in keys
    }
    attempts = [
        NodeAttempt(
            task_id=TaskId("t"),
            node=key,
            attempt=1,
            worker="w",
            started_at=NOW,
            ended_at=NOW,
            outcome=AttemptOutcome.COMPLETED,
        )
        for key in keys
    ]
    records = node_rows(None, TASK, nodes, attempts)
    assert [record["node"] for record in records[:3]] == ["analyse[0]", "analyse[1]", "analyse[2]"]
    assert records[-1]["node"] == "analyse[9999]"
    assert all(record["outcomes"] == ["completed"] for record in records)
    assert all(record["item_of"] == "analyse" for record in records)


def test_a_map_is_summed_up_from_its_items_which_follow_it() -> None:
    from pydantic import BaseModel

    from taskloom.engine.dag import MapContext, NodeContext, Workflow

    class Empty(BaseModel):
        pass

    flow = Workflow("shape", version="1", input=Empty)

    @flow.node()
    async def listed(ctx: NodeContext[Empty]) -> list[int]:
        return [1, 2, 3]

    @flow.map(over=listed)
    async def each(ctx: MapContext[Empty, int]) -> int:
        return ctx.item

    @flow.node(deps=[each])
    async def total(ctx: NodeContext[Empty]) -> int:
        values: list[int] = ctx.output(each)
        return sum(values)

    states = {"listed": NodeState.COMPLETED, "each[1]": NodeState.RUNNING}
    states |= {"each[0]": NodeState.COMPLETED, "each[2]": NodeState.COMPLETED}
    nodes = {
        key: NodeRun(node=key, state=state, attempt=1, updated_at=NOW)
        for key, state in states.items()
    }
    records = node_rows(flow.shape(), TASK, nodes, [])
    assert [record["node"] for record in records] == [
        "listed",
        "each",
        "each[0]",
        "each[1]",
        "each[2]",
        "total",
    ]
    summary = records[1]
    assert (summary["state"], summary["items"]) == ("running", "3 items: 2 completed, 1 running")
    assert records[-1]["state"] == "not started"
