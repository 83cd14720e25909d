"""The engine reports tasks, runs and attempts to its observer."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.fork import fork
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.observe import (
    AttemptEnd,
    AttemptInfo,
    NullObserver,
    Observer,
    Observers,
    RunInfo,
)
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock, InMemoryTaskStore
from tests.observability.recording import Empty, RecordingObserver, flaky_then_broken

FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)


@asynccontextmanager
async def engine(observer: Observer) -> AsyncIterator[TaskManager]:
    """A manager on a memory store with a worker running ``shaky``, reporting to *observer*."""
    store = InMemoryTaskStore()
    manager = TaskManager(store, clock=FakeClock(), observer=observer)
    flow = flaky_then_broken()
    worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w1")
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield manager
        task_group.cancel_scope.cancel()


async def run_shaky(manager: TaskManager, arguments: dict[str, Any] | None = None) -> Task:
    """Run the ``shaky`` workflow to its end."""
    task = await manager.create("shaky", arguments or {}, workflow_version="1")
    with anyio.fail_after(20):
        return await manager.wait_until_terminal(task.id)


async def test_a_retry_and_a_failure_are_reported_in_order() -> None:
    observer = RecordingObserver()
    async with engine(observer) as manager:
        done = await run_shaky(manager)
    # leaving stops the worker; a run always reports its end, even when stopped
    assert done.state is TaskState.FAILED
    run = RunInfo(task_id=done.id, workflow="shaky", resumed=False)
    assert observer.named("task_created") == [done.id]
    assert observer.named("run_started") == [run]
    assert observer.named("attempt_started") == [("flaky", 1), ("flaky", 2), ("broken", 1)]
    assert observer.named("attempt_ended") == [
        ("flaky", 1, AttemptOutcome.FAILED, True, "ConnectionError"),
        ("flaky", 2, AttemptOutcome.COMPLETED, False, None),
        ("broken", 1, AttemptOutcome.FAILED, False, "ValueError"),
    ]
    assert observer.named("task_finished") == [(done.id, "failed")]
    assert observer.named("run_ended") == [(run, "failed")]


async def test_a_cancel_is_reported_as_cancelled() -> None:
    observer = RecordingObserver()
    async with engine(observer) as manager:
        task = await manager.create("idle", {})
        await manager.cancel(task.id)
    assert observer.named("task_created") == [task.id]
    assert observer.named("task_finished") == [(task.id, "cancelled")]


class _Broken:
    def __getattr__(self, name: str) -> object:
        def fail(*args: object, **kwargs: object) -> None:
            raise RuntimeError("observer bug")

        return fail


async def test_an_observer_that_raises_does_not_break_the_run() -> None:
    async with engine(_Broken()) as manager:  # type: ignore[arg-type]
        done = await run_shaky(manager)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "node_failed"


async def test_a_run_handed_back_at_shutdown_is_reported_interrupted_then_resumed() -> None:
    observer = RecordingObserver()
    store = InMemoryTaskStore()
    manager = TaskManager(store, clock=FakeClock(), observer=observer)
    flow = Workflow("patient", version="1", input=Empty)
    started = anyio.Event()

    @flow.node()
    async def wait(ctx: NodeContext[Empty]) -> int:
        if ctx.attempt == 1:
            started.set()
            await anyio.sleep_forever()
        return ctx.attempt

    task = await manager.create("patient", {}, workflow_version="1")
    for worker_id in ("w1", "w2"):
        worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id=worker_id)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            with anyio.fail_after(20):
                if worker_id == "w1":
                    await started.wait()  # then stop w1: a shutdown hands the run back
                else:
                    done = await manager.wait_until_terminal(task.id)
            task_group.cancel_scope.cancel()
    assert done.result == 2
    first, second = (RunInfo(task_id=task.id, workflow="patient", resumed=r) for r in (False, True))
    assert observer.named("run_started") == [first, second]
    assert observer.named("run_ended") == [(first, "interrupted"), (second, "completed")]
    assert observer.named("attempt_ended") == [
        ("wait", 1, AttemptOutcome.INTERRUPTED, True, None),
        ("wait", 2, AttemptOutcome.COMPLETED, False, None),
    ]


async def test_a_fork_is_reported_as_created() -> None:
    observer = RecordingObserver()
    store = InMemoryTaskStore()
    manager = TaskManager(store, clock=FakeClock(), observer=observer)
    flow = flaky_then_broken()
    worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w1")
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        failed = await run_shaky(manager)
        task_group.cancel_scope.cancel()
    forked = await fork(manager, store, flow, failed.id)
    assert observer.named("task_created") == [failed.id, forked.task.id]


class _OldSignature(NullObserver):
    """An observer written for the four-argument ``attempt_ended`` of earlier releases."""

    def attempt_ended(  # type: ignore[override]
        self, attempt: AttemptInfo, outcome: AttemptOutcome, *, retrying: bool, duration_s: float
    ) -> None:
        raise AssertionError("never called with these arguments")


def test_an_observer_of_the_old_signature_is_logged_at_every_attempt_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """How the signature change shows (CHANGELOG, docs/observability.md): an ERROR with
    a TypeError traceback per attempt end; the other observers still get the event."""
    recording = RecordingObserver()
    observers = Observers([_OldSignature(), recording])  # type: ignore[list-item]  # the point
    attempt = AttemptInfo(TaskId("t1"), "w", "n", "p", 1)
    with caplog.at_level(logging.ERROR, logger="taskloom.engine.observe"):
        for _ in range(2):
            observers.attempt_ended(attempt, AttemptEnd(AttemptOutcome.COMPLETED, False, 0.1))
    failed = [r for r in caplog.records if r.getMessage() == "observer _OldSignature failed"]
    assert len(failed) == 2
    errors = [record.exc_info[1] for record in failed if record.exc_info is not None]
    assert len(errors) == 2
    assert all(isinstance(error, TypeError) for error in errors)
    assert "missing 2 required keyword-only arguments" in str(errors[0])
    assert len(recording.named("attempt_ended")) == 2
