"""Issue 26, item 1: a run's progress counts what its nodes report (summed as the status
message sums them), and every view reads it through one mapping."""

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.models import Progress, Task, TaskId
from taskloom.engine.progress import RunProgress
from taskloom.engine.states import TaskState
from taskloom.engine.view import fraction, percent, progress_text

NOW = datetime(2026, 11, 26, tzinfo=UTC)


class Empty(BaseModel):
    pass


def _lanes() -> Workflow[Empty]:
    flow = Workflow("lanes", version="1", input=Empty, phases=["plan", "count", "report"])

    @flow.node(phase="plan")
    async def plan(ctx: NodeContext[Empty]) -> int:
        return 0

    for index in range(4):

        async def lane(ctx: NodeContext[Empty]) -> int:
            return 0

        lane.__name__ = f"lane_{index}"
        flow.node(phase="count", deps=[plan])(lane)

    @flow.node(phase="report")
    async def report(ctx: NodeContext[Empty]) -> int:
        return 0

    return flow


def _task(completed: float, total: float, state: TaskState = TaskState.RUNNING) -> Task:
    return Task(
        id=TaskId("t" * 22),
        name="lanes",
        arguments={},
        owner=None,
        state=state,
        created_at=NOW,
        updated_at=NOW,
        ttl_ms=None,
        progress=Progress(completed=completed, total=total),
        version=3,
    )


def test_lanes_that_report_count_for_what_they_reported_not_one_node_in_six() -> None:
    flow = _lanes()
    progress = RunProgress(flow)
    progress.settled(flow.nodes["plan"])
    for index in range(4):
        progress.node_reported(flow.nodes[f"lane_{index}"], 196, 500, "numbers")
    progress.status("counting")
    assert progress.completed == pytest.approx(1 + 4 * 196 / 500)  # not 1 (of 6)
    task = _task(progress.completed, 6)
    assert percent(task) == "43%"
    assert progress_text(task) == "43% of 6 nodes"
    progress.settled(flow.nodes["lane_0"])  # a lane that ends counts 1, its report no more
    assert progress.completed == pytest.approx(2 + 3 * 196 / 500)


def test_a_long_single_node_is_not_at_zero_until_it_ends() -> None:
    flow = Workflow("one", version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return 0

    progress = RunProgress(flow)
    progress.node_reported(flow.nodes["only"], 40, 100, "files")
    assert progress.completed == pytest.approx(0.4)
    assert fraction(_task(progress.completed, 1)) == pytest.approx(0.4)


def test_a_map_counts_its_settled_items_and_what_the_others_reported() -> None:
    flow = Workflow("mapped", version="1", input=Empty)

    @flow.node()
    async def items(ctx: NodeContext[Empty]) -> list[int]:
        return list(range(10))

    @flow.map(over=items)
    async def work(ctx: MapContext[Empty, int]) -> int:
        return ctx.item

    progress = RunProgress(flow)
    progress.settled(flow.nodes["items"])
    progress.items_planned(flow.nodes["work"], 10)
    for index in range(4):
        progress.item_settled(flow.nodes["work"], f"work[{index}]")
    progress.node_reported(flow.nodes["work"], 1, 2, None, key="work[4]")
    assert progress.completed == pytest.approx(1 + (4 + 0.5) / 10)
    assert progress.planned_items == {"work": 10}


def test_an_unfinished_run_never_reads_as_done_and_a_completed_one_always_does() -> None:
    assert percent(_task(5.999, 6)) == "99%"
    assert percent(_task(3, 6, TaskState.COMPLETED)) == "100%"
