"""Dynamic fan-out (``Workflow.map``, ADR 0024) on every store: items are checkpointed
node runs with their own retries, run within their bound, in item order downstream."""

from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.fanout import ItemFailure, ItemFailurePolicy, MapResult
from taskloom.engine.fork import fork
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runs import AttemptOutcome, NodeEnd, NodeStart, NodeState, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.testing import FakeClock
from tests.contract.harness import finish, running

FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)


class Files(BaseModel):
    names: list[str]


class Stats(BaseModel):
    name: str
    size: int


def _runs(store: TaskStore) -> RunStore:
    return cast(RunStore, store)


def _sized(name: str, **map_options: Any) -> tuple[Workflow[Files], list[tuple[int, str, int]]]:
    """list -> map(analyse) -> total; *calls* records (index, item, attempt)."""
    flow = Workflow(name, version="1", input=Files, phases=["list", "analyse", "sum"])
    calls: list[tuple[int, str, int]] = []

    @flow.node(phase="list")
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, phase="analyse", **map_options)
    async def analyse(ctx: MapContext[Files, str]) -> Stats:
        calls.append((ctx.index, ctx.item, ctx.attempt))
        return Stats(name=ctx.item, size=len(ctx.item))

    @flow.node(phase="sum", deps=[analyse])
    async def total(ctx: NodeContext[Files]) -> list[str]:
        return [stats.name for stats in ctx.output(analyse)]

    return flow, calls


async def test_every_item_runs_once_as_a_checkpointed_node_in_item_order(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("order", version="1", input=Files)
    names = [f"f{i}" for i in range(6)]
    finished = {name: anyio.Event() for name in names}

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, concurrency=len(names))
    async def analyse(ctx: MapContext[Files, str]) -> Stats:
        if ctx.index + 1 < len(names):  # items end last to first
            await finished[names[ctx.index + 1]].wait()
        finished[ctx.item].set()
        return Stats(name=ctx.item, size=ctx.index)

    @flow.node(deps=[analyse])
    async def total(ctx: NodeContext[Files]) -> list[list[Any]]:
        return [[stats.name, stats.size] for stats in ctx.output(analyse)]

    async with running(manager, store, flow):
        task = await submit(manager, flow, {"names": names})
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == [[name, index] for index, name in enumerate(names)]
    checkpoints = await _runs(store).checkpoints(task.id)
    items = {key: run for key, run in checkpoints.items() if key.startswith("analyse[")}
    assert sorted(items) == sorted(f"analyse[{i}]" for i in range(6))
    assert all(run.state is NodeState.COMPLETED for run in items.values())
    assert items["analyse[4]"].output == {"name": "f4", "size": 4}
    attempts = [a for a in await _runs(store).attempts(task.id) if a.node in items]
    assert len(attempts) == 6
    assert all(a.outcome is AttemptOutcome.COMPLETED for a in attempts)


async def test_an_empty_list_maps_to_an_empty_list(manager: TaskManager, store: TaskStore) -> None:
    flow, calls = _sized("empty")
    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": []}))
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == []
    assert calls == []
    assert not any("[" in key for key in await _runs(store).checkpoints(done.id))


async def test_each_item_retries_on_its_own(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("retry_items", version="1", input=Files)
    calls: list[tuple[int, int]] = []

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, retry=RetryPolicy(max_attempts=3, initial_delay_s=2, jitter=False))
    async def analyse(ctx: MapContext[Files, str]) -> int:
        calls.append((ctx.index, ctx.attempt))
        if ctx.item == "flaky" and ctx.attempt < 3:
            raise ConnectionError("try again")
        return ctx.attempt

    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": ["a", "flaky", "b"]}))
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == [1, 3, 1]
    assert sorted(calls) == [(0, 1), (1, 1), (1, 2), (1, 3), (2, 1)]
    assert clock.slept == [2.0, 4.0]
    flaky = [a.outcome for a in await _runs(store).attempts(done.id) if a.node == "analyse[1]"]
    assert flaky == [AttemptOutcome.FAILED, AttemptOutcome.FAILED, AttemptOutcome.COMPLETED]


def _failing(name: str, policy: ItemFailurePolicy) -> Workflow[Files]:
    flow = Workflow(name, version="1", input=Files)

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, on_item_failure=policy)
    async def analyse(ctx: MapContext[Files, str]) -> str:
        if ctx.item == "bad":
            raise ValueError(f"cannot read {ctx.item}")
        return ctx.item.upper()

    @flow.node(deps=[analyse])
    async def report(ctx: NodeContext[Files]) -> Any:
        return cast(Any, ctx.output(analyse))

    return flow


async def test_a_failed_item_fails_the_run_by_default(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = _failing("fail_items", "fail")
    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": ["a", "bad", "c"]}))
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.details == {"node": "analyse[1]", "phase": "main", "attempts": 1}
    assert "cannot read bad" in done.error.message
    checkpoints = await _runs(store).checkpoints(done.id)
    assert "report" not in checkpoints


async def test_with_continue_failed_items_are_reported_and_the_run_goes_on(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("continue_items", version="1", input=Files)

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, on_item_failure="continue")
    async def analyse(ctx: MapContext[Files, str]) -> str:
        if ctx.item == "bad":
            raise ValueError("cannot read bad")
        return ctx.item.upper()

    seen: list[MapResult[str]] = []

    @flow.node(deps=[analyse])
    async def report(ctx: NodeContext[Files]) -> list[str]:
        seen.append(ctx.output(analyse))
        return ctx.output(analyse).succeeded

    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": ["a", "bad", "c"]}))
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == ["A", "C"]
    (result,) = seen
    assert result.results == ["A", None, "C"]
    assert result.failures == [
        ItemFailure(index=1, error_type="ValueError", message="cannot read bad")
    ]
    checkpoints = await _runs(store).checkpoints(done.id)
    assert checkpoints["analyse[1]"].state is NodeState.FAILED


async def test_no_more_items_run_at_once_than_the_map_allows(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("bounded", version="1", input=Files)
    active = [0]
    peak = [0]
    full = anyio.Event()

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, concurrency=3)
    async def analyse(ctx: MapContext[Files, str]) -> int:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        if active[0] == 3:
            full.set()
        with anyio.fail_after(10):
            await full.wait()  # the first three hold on until all three run
        active[0] -= 1
        return ctx.index

    async with running(manager, store, flow):
        names = [f"f{i}" for i in range(12)]
        done = await finish(manager, await submit(manager, flow, {"names": names}))
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == list(range(12))
    assert peak[0] == 3


async def test_progress_sums_the_items_of_the_phase(manager: TaskManager, store: TaskStore) -> None:
    flow = Workflow("item_progress", version="1", input=Files, phases=["list", "analyse"])
    proceed = anyio.Event()
    held = anyio.Event()

    @flow.node(phase="list")
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, phase="analyse", concurrency=1)
    async def analyse(ctx: MapContext[Files, str]) -> int:
        if ctx.index == 2:
            held.set()
            await proceed.wait()
        return ctx.index

    async with running(manager, store, flow):
        task = await submit(manager, flow, {"names": ["a", "b", "c", "d", "e"]})
        with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
            await held.wait()
            current = await manager.get(task.id)
            while current.status_message != "phase 2/2 analyse: 2/5 items":
                current = await changes.receive()
        proceed.set()
        done = await finish(manager, task)
    assert done.result == [0, 1, 2, 3, 4]


async def test_a_crash_mid_map_resumes_without_rerunning_finished_items(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow, calls = _sized("crash_map", concurrency=2)
    names = ["a", "bb", "ccc", "dddd", "eeeee"]
    task = await submit(manager, flow, {"names": names})
    runs = _runs(store)
    # A worker claimed the run, finished the list and items 0, 1 and 3, and died while
    # running item 2 (DBOS-style forgery of what it left behind).
    (claimed,) = await runs.claim_runs(
        worker="crashed",
        workflows=frozenset({flow.name}),
        now=clock.now(),
        lease_for=timedelta(seconds=FAST.lease_s),
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    lease, now = claimed.lease, clock.now()

    async def complete(key: str, output: Any) -> None:
        await runs.start_node(lease, NodeStart(node=key, attempt=1), now)
        end = NodeEnd(
            node=key,
            attempt=1,
            outcome=AttemptOutcome.COMPLETED,
            state=NodeState.COMPLETED,
            output=output,
        )
        await runs.end_node(lease, end, now)

    await complete("list_files", names)
    for index in (0, 1, 3):
        await complete(f"analyse[{index}]", {"name": f"stored{index}", "size": -index})
    await runs.start_node(lease, NodeStart(node="analyse[2]", attempt=1), now)

    async with running(manager, store, flow):
        clock.advance(FAST.lease_s + 0.001)
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    assert sorted(calls) == [(2, "ccc", 2), (4, "eeeee", 1)]
    assert done.result == ["stored0", "stored1", "ccc", "stored3", "eeeee"]
    item = [
        (a.attempt, a.worker, a.outcome)
        for a in await runs.attempts(task.id)
        if a.node == "analyse[2]"
    ]
    assert item == [(1, "crashed", AttemptOutcome.INTERRUPTED), (2, "w1", AttemptOutcome.COMPLETED)]
    assert (await runs.checkpoints(task.id))["analyse[2]"].interruptions == 1


async def test_a_thousand_items_in_one_run(manager: TaskManager, store: TaskStore) -> None:
    flow, calls = _sized("thousand", concurrency=64)
    names = [f"n{i:04d}" for i in range(1000)]
    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": names}), within_s=120)
    assert done.state is TaskState.COMPLETED, done.error
    assert done.result == names
    assert len(calls) == 1000
    assert done.progress is not None
    assert done.progress.total == 1002  # the list, the items, the sum


@pytest.mark.parametrize("store", ["memory"], indirect=True)
async def test_items_are_typed_from_the_upstream_element_type(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("typed_items", version="1", input=Files)
    seen: list[Stats] = []

    @flow.node()
    async def stats(ctx: NodeContext[Files]) -> list[Stats]:
        return [Stats(name=name, size=len(name)) for name in ctx.input.names]

    @flow.map(over=stats)
    async def double(ctx: MapContext[Files, Stats]) -> int:
        seen.append(ctx.item)
        return ctx.item.size * 2

    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, {"names": ["ab", "cde"]}))
    assert done.result == [4, 6]
    assert sorted(seen, key=lambda s: s.size) == [
        Stats(name="ab", size=2),
        Stats(name="cde", size=3),
    ]


async def test_a_resumed_run_keeps_completed_items_and_reruns_the_failed_one(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("fork_items", version="1", input=Files)
    calls: list[int] = []
    broken = {"b"}

    @flow.node()
    async def list_files(ctx: NodeContext[Files]) -> list[str]:
        return ctx.input.names

    @flow.map(over=list_files, on_item_failure="continue")
    async def analyse(ctx: MapContext[Files, str]) -> str:
        calls.append(ctx.index)
        if ctx.item in broken:
            raise ValueError("broken")
        return ctx.item.upper()

    @flow.node(deps=[analyse])
    async def report(ctx: NodeContext[Files]) -> list[str | None]:
        return ctx.output(analyse).results

    async with running(manager, store, flow):
        first = await finish(manager, await submit(manager, flow, {"names": ["a", "b", "c"]}))
        assert first.result == ["A", None, "C"]
        calls.clear()
        broken.clear()
        resumed = await fork(manager, _runs(store), flow, first.id)
        done = await finish(manager, resumed.task)
        assert done.result == ["A", "B", "C"]
        assert calls == [1]
        calls.clear()
        again = await fork(manager, _runs(store), flow, done.id, from_node="analyse")
        assert (await finish(manager, again.task)).result == ["A", "B", "C"]
    assert sorted(calls) == [0, 1, 2]  # from the map: every item runs again
