"""The workflow runner on every store: scheduling, retries, timeouts, cancel, input, resume."""

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import DependencyFailedError, NodeContext, Workflow
from taskloom.engine.errors import InvalidAnswerError, InvalidRequestError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runs import AttemptOutcome, NodeState, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock
from taskloom.validation import JsonSchemaValidator
from tests.helpers import eventually

FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)


class Empty(BaseModel):
    pass


def _runs(store: TaskStore) -> RunStore:
    return cast(RunStore, store)


@pytest.fixture
def manager(store: TaskStore, clock: FakeClock) -> TaskManager:
    return TaskManager(store, clock=clock, validator=JsonSchemaValidator())


@asynccontextmanager
async def running(
    manager: TaskManager,
    store: TaskStore,
    *workflows: Workflow[Any],
    worker_id: str = "w1",
    reclaim_from: str | None = None,
) -> AsyncIterator[Worker]:
    worker = Worker(
        manager,
        {workflow.name: workflow for workflow in workflows},
        settings=FAST,
        worker_id=worker_id,
        reclaim_from=reclaim_from,
    )
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield worker
        task_group.cancel_scope.cancel()


async def _finish(manager: TaskManager, task: Task) -> Task:
    with anyio.fail_after(20):
        return await manager.wait_until_terminal(task.id)


async def test_a_diamond_runs_in_dependency_order(manager: TaskManager, store: TaskStore) -> None:
    flow = Workflow("diamond", version="1", input=Empty)
    order: list[str] = []

    @flow.node(phase="first")
    async def a(ctx: NodeContext[Empty]) -> int:
        order.append("a")
        return 1

    @flow.node(phase="middle", deps=[a])
    async def b(ctx: NodeContext[Empty]) -> int:
        order.append("b")
        return ctx.output(a) + 10

    @flow.node(phase="middle", deps=[a])
    async def c(ctx: NodeContext[Empty]) -> int:
        order.append("c")
        return ctx.output(a) + 100

    @flow.node(phase="last", deps=[b, c])
    async def d(ctx: NodeContext[Empty]) -> dict[str, int]:
        order.append("d")
        return {"b": ctx.output(b), "c": ctx.output(c)}

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.COMPLETED
    assert done.result == {"b": 11, "c": 101}
    assert order[0] == "a"
    assert order[-1] == "d"
    assert sorted(order[1:3]) == ["b", "c"]
    assert done.progress is not None
    assert done.progress.total == 4


async def test_a_wide_fan_out_of_a_thousand_nodes(manager: TaskManager, store: TaskStore) -> None:
    flow = Workflow("fan", version="1", input=Empty, max_concurrency=64)

    @flow.node(phase="seed")
    async def seed(ctx: NodeContext[Empty]) -> int:
        return 2

    leaves = []
    for index in range(1000):

        async def leaf(ctx: NodeContext[Empty], index: int = index) -> int:
            return ctx.output(seed) * index

        leaves.append(flow.node(name=f"leaf_{index}", phase="spread", deps=[seed])(leaf))

    @flow.node(phase="sum", deps=leaves)
    async def total(ctx: NodeContext[Empty]) -> int:
        return sum(ctx.output(leaf) for leaf in leaves)

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.COMPLETED
    assert done.result == 2 * sum(range(1000))
    attempts = await _runs(store).attempts(done.id)
    assert len(attempts) == 1002
    assert all(attempt.outcome is AttemptOutcome.COMPLETED for attempt in attempts)


async def test_a_node_allowed_to_fail_lets_the_run_go_on(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("optional", version="1", input=Empty)

    @flow.node(may_fail=True)
    async def flaky(ctx: NodeContext[Empty]) -> int:
        raise OSError("disk gone")

    @flow.node()
    async def steady(ctx: NodeContext[Empty]) -> int:
        return 7

    @flow.node(deps=[flaky, steady])
    async def summary(ctx: NodeContext[Empty]) -> dict[str, Any]:
        with pytest.raises(DependencyFailedError, match="flaky"):
            ctx.output(flaky)
        return {"steady": ctx.output(steady), "failed": sorted(ctx.failed_dependencies)}

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.COMPLETED
    assert done.result == {"steady": 7, "failed": ["flaky"]}


async def test_a_failed_node_fails_the_task_and_stops_its_siblings(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("breaks", version="1", input=Empty)
    sibling_cancelled = anyio.Event()
    sibling_started = anyio.Event()

    @flow.node(phase="work")
    async def slow(ctx: NodeContext[Empty]) -> int:
        sibling_started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            sibling_cancelled.set()
            raise
        return 0

    @flow.node(phase="work")
    async def broken(ctx: NodeContext[Empty]) -> int:
        await sibling_started.wait()
        raise ValueError("bad input 42")

    @flow.node(phase="after", deps=[slow, broken])
    async def never(ctx: NodeContext[Empty]) -> int:
        raise AssertionError("must not run")

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "node_failed"
    assert done.error.error_type == "ValueError"
    assert "node 'broken'" in done.error.message
    assert "bad input 42" in done.error.message
    assert done.error.fingerprint
    assert sibling_cancelled.is_set()
    outcomes = {attempt.node: attempt.outcome for attempt in await _runs(store).attempts(done.id)}
    assert outcomes == {"slow": AttemptOutcome.CANCELLED, "broken": AttemptOutcome.FAILED}


async def test_retries_wait_with_backoff_on_the_clock_and_are_recorded(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("retry", version="1", input=Empty)
    calls: list[int] = []

    @flow.node(retry=RetryPolicy(max_attempts=4, initial_delay_s=1, backoff=3, jitter=False))
    async def flaky(ctx: NodeContext[Empty]) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError(f"try {ctx.attempt}")
        return "ok"

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.COMPLETED
    assert calls == [1, 2, 3]
    assert clock.slept == [1.0, 3.0]
    attempts = await _runs(store).attempts(done.id)
    assert [a.outcome for a in attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.FAILED,
        AttemptOutcome.COMPLETED,
    ]
    first_error = attempts[0].error
    assert first_error is not None
    assert (first_error.error_type, first_error.message) == ("ConnectionError", "try 1")
    assert attempts[0].error == attempts[0].error
    second_error = attempts[1].error
    assert second_error is not None
    assert first_error.fingerprint == second_error.fingerprint  # numbers are masked


async def test_an_exception_not_listed_is_not_retried(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("strict", version="1", input=Empty)

    @flow.node(retry=RetryPolicy(max_attempts=5, retry_on=(ConnectionError,)))
    async def picky(ctx: NodeContext[Empty]) -> int:
        raise KeyError("missing")

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.FAILED
    assert len(await _runs(store).attempts(done.id)) == 1


async def test_a_timeout_cancels_the_node_and_counts_as_a_failed_attempt(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("slow", version="1", input=Empty)
    cancelled: list[int] = []

    @flow.node(timeout=0.05, retry=RetryPolicy(max_attempts=2, initial_delay_s=0))
    async def stuck(ctx: NodeContext[Empty]) -> int:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(ctx.attempt)
        return 0

    async with running(manager, store, flow):
        done = await _finish(manager, await submit(manager, flow))
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.error_type == "TimeoutError"
    assert cancelled == [1, 2]
    outcomes = [a.outcome for a in await _runs(store).attempts(done.id)]
    assert outcomes == [AttemptOutcome.TIMED_OUT, AttemptOutcome.TIMED_OUT]


async def test_cancel_reaches_the_running_nodes_and_nothing_starts_after_it(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("cancel", version="1", input=Empty)
    in_phase_two = anyio.Event()
    both_cancelled = anyio.Event()
    seen_cancel: list[str] = []
    started: list[str] = []

    @flow.node(phase="one")
    async def prepare(ctx: NodeContext[Empty]) -> int:
        started.append("prepare")
        return 1

    def blocker(name: str) -> Callable[[NodeContext[Empty]], Coroutine[Any, Any, int]]:
        async def block(ctx: NodeContext[Empty]) -> int:
            started.append(name)
            if len(started) == 3:
                in_phase_two.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                seen_cancel.append(name)
                if len(seen_cancel) == 2:
                    both_cancelled.set()
                raise
            return 0

        return block

    first = flow.node(name="first", phase="two", deps=[prepare])(blocker("first"))
    second = flow.node(name="second", phase="two", deps=[prepare])(blocker("second"))

    @flow.node(phase="three", deps=[first, second])
    async def finish(ctx: NodeContext[Empty]) -> int:
        started.append("finish")
        return 3

    async with running(manager, store, flow):
        task = await submit(manager, flow)
        with anyio.fail_after(10):
            await in_phase_two.wait()
            cancelled = await manager.cancel(task.id, reason="stop")
            await both_cancelled.wait()
        assert cancelled.state is TaskState.CANCELLED

        async def cancellations_recorded() -> bool:
            attempts = await _runs(store).attempts(task.id)
            return sum(a.outcome is AttemptOutcome.CANCELLED for a in attempts) == 2

        await eventually(cancellations_recorded)
    assert sorted(seen_cancel) == ["first", "second"]
    assert "finish" not in started
    final = await manager.get(task.id)
    assert final.state is TaskState.CANCELLED
    outcomes = {a.node: a.outcome for a in await _runs(store).attempts(task.id)}
    assert outcomes == {
        "prepare": AttemptOutcome.COMPLETED,
        "first": AttemptOutcome.CANCELLED,
        "second": AttemptOutcome.CANCELLED,
    }


class Confirm(BaseModel):
    go: bool


async def test_a_node_asks_and_continues_with_the_answer(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("ask", version="1", input=Empty)

    @flow.node()
    async def decide(ctx: NodeContext[Empty]) -> str:
        answer = await ctx.ask("Deploy now?", Confirm)
        return "deployed" if answer.go else "skipped"

    async with running(manager, store, flow):
        task = await submit(manager, flow)
        with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
            current = await manager.get(task.id)
            while current.state is not TaskState.INPUT_REQUIRED:
                current = await changes.receive()
        (key,) = current.input_requests
        assert current.input_requests[key].message == "Deploy now?"
        with pytest.raises(InvalidAnswerError, match="does not match"):
            await manager.provide_input(task.id, key, {"go": "maybe"})
        assert (await manager.get(task.id)).state is TaskState.INPUT_REQUIRED
        await manager.provide_input(task.id, key, {"go": True})
        done = await _finish(manager, task)
    assert done.state is TaskState.COMPLETED
    assert done.result == "deployed"


async def test_a_run_resumes_from_its_last_checkpoint_after_its_worker_dies(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("resume", version="1", input=Empty)
    runs_of: dict[str, int] = {"one": 0, "two": 0}
    two_started = anyio.Event()
    release = anyio.Event()

    @flow.node()
    async def one(ctx: NodeContext[Empty]) -> int:
        runs_of["one"] += 1
        return 1

    @flow.node(deps=[one])
    async def two(ctx: NodeContext[Empty]) -> int:
        runs_of["two"] += 1
        two_started.set()
        await release.wait()
        return ctx.output(one) + 1

    async with running(manager, store, flow, worker_id="dead"):
        task = await submit(manager, flow)
        with anyio.fail_after(10):
            await two_started.wait()
    # The first worker shut down: its attempt is recorded as interrupted and its lease
    # handed back, so another worker resumes the run at once.
    release.set()
    async with running(manager, store, flow, worker_id="alive"):
        done = await _finish(manager, task)
    assert done.state is TaskState.COMPLETED
    assert done.result == 2
    assert runs_of == {"one": 1, "two": 2}
    attempts = await _runs(store).attempts(task.id)
    two_attempts = [(a.attempt, a.worker, a.outcome) for a in attempts if a.node == "two"]
    assert two_attempts == [
        (1, "dead", AttemptOutcome.INTERRUPTED),
        (2, "alive", AttemptOutcome.COMPLETED),
    ]


async def test_a_restarted_worker_takes_back_its_own_runs_at_once(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("mine", version="1", input=Empty)
    first_run = anyio.Event()
    calls: list[int] = []

    @flow.node()
    async def work(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            first_run.set()
            await anyio.sleep_forever()
        return ctx.attempt

    async with running(manager, store, flow, worker_id="host-slot-0"):
        task = await submit(manager, flow)
        with anyio.fail_after(10):
            await first_run.wait()
    async with running(manager, store, flow, worker_id="host-slot-0b", reclaim_from="host-slot-0"):
        done = await _finish(manager, task)
    assert done.result == 2
    outcomes = [a.outcome for a in await _runs(store).attempts(task.id)]
    assert outcomes[-1] is AttemptOutcome.COMPLETED


async def test_bad_arguments_are_refused_before_a_task_exists(
    manager: TaskManager, store: TaskStore
) -> None:
    class Needs(BaseModel):
        path: str

    flow = Workflow("needs", version="1", input=Needs)

    @flow.node()
    async def only(ctx: NodeContext[Needs]) -> str:
        return ctx.input.path

    with pytest.raises(InvalidRequestError, match="invalid arguments for needs: path"):
        await submit(manager, flow, {"path": 3})
    assert (await manager.list()).tasks == ()


async def test_a_stale_worker_cannot_write_after_losing_its_lease(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    flow = Workflow("fence", version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return 1

    task = await submit(manager, flow)
    runs = _runs(store)
    from datetime import timedelta

    (old,) = await runs.claim_runs(
        worker="old",
        workflows=frozenset({"fence"}),
        now=clock.now(),
        lease_for=timedelta(seconds=1),
        limit=10,
        start=claim_start(manager.clock.now()),
    )
    clock.advance(2)
    (new,) = await runs.claim_runs(
        worker="new",
        workflows=frozenset({"fence"}),
        now=clock.now(),
        lease_for=timedelta(seconds=10),
        limit=10,
        start=claim_start(manager.clock.now()),
    )
    assert new.resumed
    from taskloom.engine.errors import LeaseLostError

    with pytest.raises(LeaseLostError):
        await manager.complete(task.id, "stale", lease=old.lease)
    done = await manager.complete(task.id, "fresh", lease=new.lease)
    assert done.result == "fresh"
    node_states = {n.state for n in new.nodes.values()}
    assert node_states <= {NodeState.COMPLETED}


async def test_progress_names_the_phase_and_sums_what_its_nodes_report(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("progress", version="1", input=Empty, phases=["scan", "sum"])
    reported = anyio.Event()
    proceed = anyio.Event()
    count = [0]

    def shard(done: int) -> Callable[[NodeContext[Empty]], Coroutine[Any, Any, int]]:
        async def run(ctx: NodeContext[Empty]) -> int:
            await ctx.report(done, 10, "files")
            count[0] += 1
            if count[0] == 2:
                reported.set()
            await proceed.wait()
            return done

        return run

    one = flow.node(name="one", phase="scan")(shard(3))
    two = flow.node(name="two", phase="scan")(shard(4))

    @flow.node(phase="sum", deps=[one, two])
    async def total(ctx: NodeContext[Empty]) -> int:
        return ctx.output(one) + ctx.output(two)

    async with running(manager, store, flow):
        task = await submit(manager, flow)
        with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
            await reported.wait()
            current = await manager.get(task.id)
            while current.status_message != "phase 1/2 scan: 7/20 files":
                current = await changes.receive()
        proceed.set()
        done = await _finish(manager, task)
    assert done.result == 7
    assert done.progress is not None
    assert (done.progress.completed, done.progress.total) == (3, 3)


async def _crashed_mid_node(
    manager: TaskManager, store: TaskStore, clock: FakeClock, flow: Workflow[Any], worker: str
) -> Task:
    """A run whose worker claimed it, started node `only`, and died (DBOS-style forgery)."""
    from datetime import timedelta

    from taskloom.engine.runs import NodeStart

    task = await submit(manager, flow)
    (claimed,) = await _runs(store).claim_runs(
        worker=worker,
        workflows=frozenset({flow.name}),
        now=clock.now(),
        lease_for=timedelta(seconds=FAST.lease_s),
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    await _runs(store).start_node(claimed.lease, NodeStart(node="only", attempt=1), clock.now())
    return task


def _single_node_flow(name: str, calls: list[int]) -> Workflow[Empty]:
    flow = Workflow(name, version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        calls.append(ctx.attempt)
        return ctx.attempt

    return flow


async def test_an_expired_lease_is_reclaimed_and_the_interrupted_node_runs_again(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    calls: list[int] = []
    flow = _single_node_flow("expired", calls)
    task = await _crashed_mid_node(manager, store, clock, flow, worker="crashed")
    async with running(manager, store, flow, worker_id="other"):
        await anyio.wait_all_tasks_blocked()
        assert calls == []  # the lease still stands
        clock.advance(FAST.lease_s + 0.001)
        done = await _finish(manager, task)
    assert done.result == 2
    assert calls == [2]
    outcomes = [(a.attempt, a.worker, a.outcome) for a in await _runs(store).attempts(task.id)]
    assert outcomes == [
        (1, "crashed", AttemptOutcome.INTERRUPTED),
        (2, "other", AttemptOutcome.COMPLETED),
    ]


async def test_the_next_holder_of_a_dead_workers_slot_reclaims_its_runs_at_once(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    calls: list[int] = []
    flow = _single_node_flow("slot", calls)
    task = await _crashed_mid_node(manager, store, clock, flow, worker="host:slot-0")
    async with running(manager, store, flow, worker_id="host:slot-0", reclaim_from="host:slot-0"):
        done = await _finish(manager, task)  # the fake clock never moves: no lease expired
    assert done.result == 2
    assert calls == [2]


async def test_a_node_whose_worker_keeps_dying_fails(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    from datetime import timedelta

    from taskloom.engine.runs import NodeStart

    calls: list[int] = []
    flow = _single_node_flow("doomed", calls)
    task = await submit(manager, flow)
    for attempt in range(1, 4):
        (claimed,) = await _runs(store).claim_runs(
            worker=f"crash-{attempt}",
            workflows=frozenset({"doomed"}),
            now=clock.now(),
            lease_for=timedelta(seconds=1),
            limit=1,
            start=claim_start(manager.clock.now()),
        )
        start = NodeStart(
            node="only",
            attempt=attempt,
            interruptions=attempt - 1,
            interrupted_attempt=attempt - 1 if attempt > 1 else None,
        )
        await _runs(store).start_node(claimed.lease, start, clock.now())
        clock.advance(2)
    async with running(manager, store, flow):
        done = await _finish(manager, task)
    assert calls == []
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.error_type == "WorkerLost"
    history = await _runs(store).attempts(task.id)
    assert [a.outcome for a in history] == [AttemptOutcome.INTERRUPTED] * 3
    node = (await _runs(store).checkpoints(task.id))["only"]
    assert (node.state, node.attempt, node.interruptions) == (NodeState.FAILED, 3, 3)
    assert done.error.details == {"node": "only", "phase": "main", "attempts": 3}


@pytest.mark.parametrize("end", ["complete", "fail", "cancel"])
async def test_the_fenced_write_that_ends_a_run_drops_its_lease(
    manager: TaskManager, store: TaskStore, clock: FakeClock, end: str
) -> None:
    """A worker killed between writing the outcome and releasing the lease leaves no lease
    behind: the outcome and the release commit together (a later renewal holds nothing)."""
    from datetime import timedelta

    from taskloom.engine.models import TaskFailure

    task = await manager.create("job")
    lease_for = timedelta(seconds=10)
    (run,) = await _runs(store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=lease_for,
        limit=1,
        start=claim_start(manager.clock.now()),
    )
    await manager.report_progress(task.id, completed=1, lease=run.lease)
    held = await _runs(store).renew_leases(worker="w", now=clock.now(), lease_for=lease_for)
    assert set(held) == {task.id}
    if end == "complete":
        await manager.complete(task.id, "ok", lease=run.lease)
    elif end == "fail":
        await manager.fail(task.id, TaskFailure(code="boom", message="no"), lease=run.lease)
    else:
        await manager.cancel(task.id)  # not the worker's write: the worker releases later
    held = await _runs(store).renew_leases(worker="w", now=clock.now(), lease_for=lease_for)
    assert set(held) == (set() if end != "cancel" else {task.id})
    await _runs(store).release_lease(run.lease)  # what the worker does next
    assert await _runs(store).renew_leases(worker="w", now=clock.now(), lease_for=lease_for) == {}
