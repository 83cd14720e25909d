"""The runner on every store: the attempt that completes a run's DAG commits its end with
the task's result (``finish_run``), and every other write is as it was."""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Progress, Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runner import RunExecution
from taskloom.engine.runs import AttemptOutcome, NodeState, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock
from tests.observability.recording import RecordingObserver

LEASE_FOR = timedelta(seconds=10)


class Empty(BaseModel):
    pass


class Spy:
    """A RunStore that records each call by method and node (``None`` if not a node's)."""

    def __init__(self, runs: RunStore) -> None:
        self._runs = runs
        self.calls: list[tuple[str, str | None]] = []

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._runs, name)

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            node = getattr(args[1], "node", None) if len(args) > 1 else None
            self.calls.append((name, node))
            return await method(*args, **kwargs)

        return recorded


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def manager(store: TaskStore, clock: FakeClock, observer: RecordingObserver) -> TaskManager:
    return TaskManager(store, clock=clock, observer=observer)


def _runs(store: TaskStore) -> RunStore:
    return cast(RunStore, store)


async def _execute(
    manager: TaskManager, store: TaskStore, clock: FakeClock, flow: Workflow[Any]
) -> tuple[Task, Spy]:
    """Claim a new run of *flow* and execute it here, to its end (no worker around it)."""
    task = await submit(manager, flow)
    (claimed,) = await _runs(store).claim_runs(
        worker="w",
        workflows=frozenset({flow.name}),
        now=clock.now(),
        lease_for=LEASE_FOR,
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    spy = Spy(_runs(store))
    spied = TaskManager(
        store, runs=cast(RunStore, spy), clock=manager.clock, observer=manager.observer
    )
    execution = RunExecution(
        claimed=claimed,
        workflow=flow,
        manager=spied,
        node_concurrency=4,
        progress_interval_s=0,
    )
    with anyio.fail_after(10):
        await execution.execute()
    return await store.get(task.id, clock.now()) or task, spy


def _ends(spy: Spy) -> list[tuple[str, str | None]]:
    return [call for call in spy.calls if call[0] in {"end_node", "finish_run"}]


def _one_node(name: str, body: Callable[[NodeContext[Empty]], Awaitable[int]]) -> Workflow[Empty]:
    flow = Workflow(name, version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return await body(ctx)

    return flow


async def _returns_one(ctx: NodeContext[Empty]) -> int:
    return 1


async def test_a_one_node_run_writes_its_node_end_with_its_result(
    manager: TaskManager, store: TaskStore, clock: FakeClock, observer: RecordingObserver
) -> None:
    done, spy = await _execute(manager, store, clock, _one_node("one", _returns_one))
    assert spy.calls == [("start_node", "only"), ("finish_run", "only")]
    assert done.state is TaskState.COMPLETED
    assert (done.result, done.status_message) == (1, "completed 1 node in 1 phase")
    assert done.progress == Progress(completed=1, total=1)
    node = (await _runs(store).checkpoints(done.id))["only"]
    assert (node.state, node.output) == (NodeState.COMPLETED, 1)
    outcomes = [a.outcome for a in await _runs(store).attempts(done.id)]
    assert outcomes == [AttemptOutcome.COMPLETED]
    assert await _runs(store).renew_leases(worker="w", now=clock.now(), lease_for=LEASE_FOR) == {}
    events = [name for name, _ in observer.events if name != "task_created"]
    assert events == [
        "run_started",
        "attempt_started",
        "attempt_ended",
        "task_finished",
        "run_ended",
    ]
    assert observer.named("attempt_ended")[0][2] is AttemptOutcome.COMPLETED
    assert [outcome for _, outcome in observer.named("run_ended")] == ["completed"]


async def test_only_the_node_that_completes_the_dag_is_folded(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("diamond", version="1", input=Empty)

    @flow.node()
    async def a(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(deps=[a])
    async def b(ctx: NodeContext[Empty]) -> int:
        return ctx.output(a) + 1

    @flow.node(deps=[a])
    async def c(ctx: NodeContext[Empty]) -> int:
        return ctx.output(a) + 2

    @flow.node(deps=[b, c])
    async def d(ctx: NodeContext[Empty]) -> int:
        return ctx.output(b) * ctx.output(c)

    done, spy = await _execute(manager, store, clock, flow)
    assert done.result == 6
    ends = _ends(spy)
    assert sorted(ends[:3]) == [("end_node", "a"), ("end_node", "b"), ("end_node", "c")]
    assert ends[3:] == [("finish_run", "d")]
    assert {n.state for n in (await _runs(store).checkpoints(done.id)).values()} == {
        NodeState.COMPLETED
    }


async def test_a_last_node_that_retries_records_its_failures_alone_and_its_success_with_the_result(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("retry", version="1", input=Empty)

    @flow.node(retry=RetryPolicy(max_attempts=2, initial_delay_s=1, jitter=False))
    async def only(ctx: NodeContext[Empty]) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("once")
        return ctx.attempt

    done, spy = await _execute(manager, store, clock, flow)
    assert (done.state, done.result) == (TaskState.COMPLETED, 2)
    assert _ends(spy) == [("end_node", "only"), ("finish_run", "only")]
    outcomes = [a.outcome for a in await _runs(store).attempts(done.id)]
    assert outcomes == [AttemptOutcome.FAILED, AttemptOutcome.COMPLETED]


async def test_a_last_node_that_fails_is_recorded_then_fails_the_task_as_before(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    async def broken(ctx: NodeContext[Empty]) -> int:
        raise ValueError("no")

    done, spy = await _execute(manager, store, clock, _one_node("broken", broken))
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "node_failed"
    assert _ends(spy) == [("end_node", "only")]


async def test_a_last_node_allowed_to_fail_is_recorded_then_the_task_completes_as_before(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("optional", version="1", input=Empty)

    @flow.node()
    async def steady(ctx: NodeContext[Empty]) -> int:
        return 7

    @flow.node(deps=[steady], may_fail=True)
    async def extra(ctx: NodeContext[Empty]) -> int:
        raise OSError("gone")

    done, spy = await _execute(manager, store, clock, flow)
    assert done.state is TaskState.COMPLETED
    assert done.result is None  # the sole sink failed: no output
    assert _ends(spy) == [("end_node", "steady"), ("end_node", "extra")]


async def test_an_invalid_result_records_the_node_end_then_fails_the_task(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    class Output(BaseModel):
        count: int

    flow = Workflow("invalid", version="1", input=Empty, output=Output, result="only")

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> str:
        return "not an object"

    done, spy = await _execute(manager, store, clock, flow)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "invalid_output"
    assert _ends(spy) == [("end_node", "only")]
    node = (await _runs(store).checkpoints(done.id))["only"]
    assert (node.state, node.output) == (NodeState.COMPLETED, "not an object")


async def test_a_task_cancelled_meanwhile_stays_cancelled_and_the_node_end_is_still_recorded(
    manager: TaskManager, store: TaskStore, clock: FakeClock, observer: RecordingObserver
) -> None:
    async def cancelled_under_it(ctx: NodeContext[Empty]) -> int:
        await manager.cancel(ctx.task_id, reason="changed my mind")
        return 1

    done, spy = await _execute(manager, store, clock, _one_node("cancel", cancelled_under_it))
    assert (done.state, done.status_message, done.result) == (
        TaskState.CANCELLED,
        "changed my mind",
        None,
    )
    assert _ends(spy) == [("finish_run", "only"), ("end_node", "only")]
    node = (await _runs(store).checkpoints(done.id))["only"]
    assert (node.state, node.output) == (NodeState.COMPLETED, 1)
    outcomes = [a.outcome for a in await _runs(store).attempts(done.id)]
    assert outcomes == [AttemptOutcome.COMPLETED]
    assert spy.calls[-1] == ("release_lease", None)
    assert await _runs(store).renew_leases(worker="w", now=clock.now(), lease_for=LEASE_FOR) == {}
    assert [outcome for _, outcome in observer.named("run_ended")] == ["cancelled"]


async def test_a_lease_lost_meanwhile_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock, observer: RecordingObserver
) -> None:
    async def stolen_under_it(ctx: NodeContext[Empty]) -> int:
        clock.advance(LEASE_FOR.total_seconds() + 1)
        (stolen,) = await _runs(store).claim_runs(
            worker="thief",
            workflows=frozenset({"stolen"}),
            now=clock.now(),
            lease_for=LEASE_FOR,
            limit=1,
            start=claim_start(manager.clock.now()),
        )
        assert stolen.task.id == ctx.task_id
        return 1

    done, spy = await _execute(manager, store, clock, _one_node("stolen", stolen_under_it))
    assert done.state is TaskState.RUNNING
    assert spy.calls == [("start_node", "only"), ("finish_run", "only")]
    node = (await _runs(store).checkpoints(done.id))["only"]
    assert (node.state, node.attempt) == (NodeState.RUNNING, 1)
    (attempt,) = await _runs(store).attempts(done.id)
    assert attempt.ended_at is None
    held = await _runs(store).renew_leases(worker="thief", now=clock.now(), lease_for=LEASE_FOR)
    assert set(held) == {done.id}
    assert [outcome for _, outcome in observer.named("run_ended")] == ["lease_lost"]


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_one_node_run_commits_four_transactions_on_sqlite(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Created, claimed, its node started, and its node ended with the result: four
    commits. It was six: the node's end and the result were two, and the progress line
    "phase 1/1 main: 1/1 nodes" was written between them, to be overwritten at once."""
    assert isinstance(store, SqliteTaskStore)
    before = store.writer.batches
    done, spy = await _execute(manager, store, clock, _one_node("count", _returns_one))
    assert done.state is TaskState.COMPLETED
    assert store.writer.batches - before == 4
    assert [name for name, _ in spy.calls] == ["start_node", "finish_run"]
