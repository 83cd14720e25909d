"""A run is executed by at most one body at a time, on every store (ADR 0038).

The fault-injection point is :class:`SlowTransactions`: a run-store transaction that
takes longer than a lease, as one retried through a database outage does. The fake
clock moves past the lease while the call is under way, before the store's transaction
attempt runs. A ledger of node-body starts and ends then shows whether a second body of
the same node ever started while the first was still running: a lease computed from a
time taken before the delay lands already expired, and the claim that follows (this
worker's own, or another's) starts the node again beside the running one.
"""

from collections.abc import Callable
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker
from taskloom.testing import FakeClock
from tests.contract.harness import FAST, finish, run_store
from tests.helpers import eventually


class SlowTransactions:
    """A run store whose armed method takes *delay_s* of (fake) time before its
    transaction attempt runs; every call is counted, and ``down`` fails the named
    methods as a store past its retries does."""

    def __init__(self, store: RunStore, clock: FakeClock, *, delay_s: float) -> None:
        self._store = store
        self._clock = clock
        self._delay_s = delay_s
        self.armed: set[str] = set()
        """Methods whose next call is slow (each once)."""
        self.down: set[str] = set()
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if not callable(method) or name.startswith("_"):
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name in self.down:
                raise DatabaseUnavailableError(f"PostgreSQL test is unavailable ({name})")
            if name in self.armed:
                self.armed.discard(name)
                self._clock.advance(self._delay_s)  # the outage the transaction waited out
            return await method(*args, **kwargs)

        return call


class Ledger:
    """Starts and ends of node bodies, and the most that ran at once."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.running = 0
        self.most = 0

    def start(self, attempt: int) -> None:
        self.events.append(("start", attempt))
        self.running += 1
        self.most = max(self.most, self.running)

    def end(self, attempt: int) -> None:
        self.events.append(("end", attempt))
        self.running -= 1


class Empty(BaseModel):
    pass


def _workflow(ledger: Ledger, gate: anyio.Event) -> Workflow[Empty]:
    flow = Workflow("one_body", version="1", input=Empty)

    @flow.node()
    async def body(ctx: NodeContext[Empty]) -> int:
        ledger.start(ctx.attempt)
        try:
            await gate.wait()
        finally:
            ledger.end(ctx.attempt)
        return ctx.attempt

    return flow


async def _until(condition: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return condition()

    await eventually(holds, every_s=0.005)


@pytest.mark.parametrize("slow", ["claim_runs", "renew_leases"])
async def test_a_transaction_slower_than_the_lease_starts_no_second_body(
    store: TaskStore, clock: FakeClock, slow: str
) -> None:
    ledger, gate = Ledger(), anyio.Event()
    flow = _workflow(ledger, gate)
    lease_s = FAST.lease_s
    first = SlowTransactions(run_store(store), clock, delay_s=lease_s + 1)
    second = SlowTransactions(run_store(store), clock, delay_s=0)
    one = TaskManager(store, runs=cast(RunStore, first), clock=clock)
    other = TaskManager(store, runs=cast(RunStore, second), clock=clock)
    settings = FAST.model_copy(update={"heartbeat_s": 0.2})
    w1 = Worker(one, {flow.name: flow}, settings=settings, worker_id="w1")
    w2 = Worker(other, {flow.name: flow}, settings=settings, worker_id="w2")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            task = await submit(one, flow, {})
            if slow == "claim_runs":
                first.armed.add("claim_runs")  # the claim that takes the task is slow
            await task_group.start(w1.run)
            await _until(lambda: ledger.running == 1)
            if slow == "renew_leases":
                first.armed.add("renew_leases")
                await _until(lambda: "renew_leases" not in first.armed)
                seen = first.calls["renew_leases"]
                await _until(lambda: first.calls["renew_leases"] > seen)  # it committed
            await task_group.start(w2.run)
            # both workers look for work a few times: neither may take the running run
            claims = first.calls["claim_runs"], second.calls.get("claim_runs", 0)
            await _until(
                lambda: (
                    first.calls["claim_runs"] >= claims[0] + 3
                    and second.calls.get("claim_runs", 0) >= claims[1] + 3
                )
            )
            assert ledger.most == 1, ledger.events
            gate.set()
            done = await finish(one, task)
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    # One body at a time, start to end: a claim made at the advanced time before the late
    # renewal lands may take the expired lease, once the first body has stopped.
    assert ledger.events[0] == ("start", 1), ledger.events
    assert ledger.events == [
        (kind, attempt) for _, attempt in ledger.events[0::2] for kind in ("start", "end")
    ], ledger.events


async def test_a_worker_that_claims_its_own_running_run_stops_the_old_body_first(
    store: TaskStore, clock: FakeClock
) -> None:
    """The worker's own lease expired while its heartbeat could not reach the store;
    once the store answers, its claim may take the run back: the body still running
    is stopped and has ended before the new one starts."""
    ledger, gate = Ledger(), anyio.Event()
    flow = _workflow(ledger, gate)
    runs = SlowTransactions(run_store(store), clock, delay_s=0)
    manager = TaskManager(store, runs=cast(RunStore, runs), clock=clock)
    worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w1")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            task = await submit(manager, flow, {})
            await _until(lambda: ledger.running == 1)
            runs.down = {"renew_leases", "claim_runs"}
            seen = runs.calls["claim_runs"]
            await _until(lambda: runs.calls["claim_runs"] > seen)
            clock.advance(FAST.lease_s + 1)  # the lease expired during the outage
            runs.down = set()
            await _until(lambda: [kind for kind, _ in ledger.events].count("start") == 2)
            gate.set()
            done = await finish(manager, task)
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    assert ledger.most == 1, ledger.events
    assert worker.active_runs == 0


async def test_a_worker_stops_a_run_it_cannot_renew_before_another_may_take_it(
    store: TaskStore, clock: FakeClock
) -> None:
    """Across processes: this worker's store is unreachable, so its lease will run out
    and another worker may then take the run; it stops the body before that."""
    ledger, gate = Ledger(), anyio.Event()
    flow = _workflow(ledger, gate)
    cut_off = SlowTransactions(run_store(store), clock, delay_s=0)
    one = TaskManager(store, runs=cast(RunStore, cut_off), clock=clock)
    other = TaskManager(store, clock=clock)
    short = FAST.model_copy(update={"lease_s": 0.5, "heartbeat_s": 0.1})
    w1 = Worker(one, {flow.name: flow}, settings=short, worker_id="w1")
    w2 = Worker(other, {flow.name: flow}, settings=FAST, worker_id="w2")
    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            await task_group.start(w1.run)
            task = await submit(one, flow, {})
            await _until(lambda: ledger.running == 1)
            cut_off.down = {"claim_runs", "renew_leases", "release_lease", "end_node"}
            with anyio.fail_after(5):
                await _until(lambda: ledger.running == 0)  # stopped before the lease ran out
            clock.advance(short.lease_s + 1)  # the lease ran out: another worker may claim
            await task_group.start(w2.run)
            gate.set()
            done = await finish(other, task)
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    assert ledger.most == 1, ledger.events
    assert [kind for kind, _ in ledger.events] == ["start", "end", "start", "end"]
