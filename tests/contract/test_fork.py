"""Resuming a finished run as a new task, on every store: completed nodes are kept."""

from collections import Counter

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import InvalidRequestError, TaskNotFoundError, TaskStateError
from taskloom.engine.fork import downstream, fork
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome, NodeState
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from tests.contract.harness import finish, run_store, running


class Empty(BaseModel):
    pass


def _flaky() -> tuple[Workflow[Empty], Counter[str], dict[str, bool]]:
    """fetch -> parse -> publish, plus notes (after fetch); parse fails while broken."""
    flow = Workflow("flaky", version="1", input=Empty)
    calls: Counter[str] = Counter()
    broken = {"parse": True}

    @flow.node(phase="get")
    async def fetch(ctx: NodeContext[Empty]) -> int:
        calls["fetch"] += 1
        return 20

    @flow.node(phase="get", deps=[fetch])
    async def notes(ctx: NodeContext[Empty]) -> str:
        calls["notes"] += 1
        return "ok"

    @flow.node(phase="work", deps=[fetch, notes])
    async def parse(ctx: NodeContext[Empty]) -> int:
        calls["parse"] += 1
        if broken["parse"]:
            raise RuntimeError("disk full")
        return ctx.output(fetch) + 1

    @flow.node(phase="work", deps=[parse])
    async def publish(ctx: NodeContext[Empty]) -> int:
        calls["publish"] += 1
        return ctx.output(parse) * 2

    return flow, calls, broken


async def test_a_failed_run_resumes_from_the_failed_node(
    manager: TaskManager, store: TaskStore
) -> None:
    flow, calls, broken = _flaky()
    async with running(manager, store, flow):
        failed = await finish(manager, await submit(manager, flow))
        assert failed.state is TaskState.FAILED
        broken["parse"] = False  # the operator fixed the cause
        resumed = await fork(manager, run_store(store), flow, failed.id)
        assert resumed.kept == ("fetch", "notes")
        assert resumed.rerun == ("parse", "publish")
        assert resumed.task.id != failed.id
        assert resumed.task.arguments == failed.arguments
        assert resumed.task.workflow_version == "1"
        done = await finish(manager, resumed.task)
    assert done.state is TaskState.COMPLETED
    assert done.result == 42
    assert calls == {"fetch": 1, "notes": 1, "parse": 2, "publish": 1}
    assert (await manager.get(failed.id)).state is TaskState.FAILED  # terminal stays terminal
    history = await run_store(store).attempts(done.id)
    assert sorted((a.node, a.outcome) for a in history) == [
        ("parse", AttemptOutcome.COMPLETED),
        ("publish", AttemptOutcome.COMPLETED),
    ]
    kept = await run_store(store).checkpoints(done.id)
    assert kept["fetch"].state is NodeState.COMPLETED
    assert kept["fetch"].output == 20


async def test_a_chosen_node_and_its_dependents_run_again(
    manager: TaskManager, store: TaskStore
) -> None:
    flow, calls, broken = _flaky()
    broken["parse"] = False
    async with running(manager, store, flow):
        first = await finish(manager, await submit(manager, flow))
        again = await fork(manager, run_store(store), flow, first.id, from_node="notes")
        assert again.kept == ("fetch",)
        assert again.rerun == ("notes", "parse", "publish")
        assert (await finish(manager, again.task)).result == 42
    assert calls == {"fetch": 1, "notes": 2, "parse": 2, "publish": 2}


async def test_what_cannot_be_resumed_is_refused_clearly(
    manager: TaskManager, store: TaskStore
) -> None:
    flow, _, broken = _flaky()
    runs = run_store(store)
    queued = await submit(manager, flow)
    with pytest.raises(TaskStateError, match="only a finished task can be resumed"):
        await fork(manager, runs, flow, queued.id)
    with pytest.raises(TaskNotFoundError):
        await fork(manager, runs, flow, "no-such-task")
    broken["parse"] = False
    async with running(manager, store, flow):
        done = await finish(manager, queued)
    with pytest.raises(InvalidRequestError, match="completed every node"):
        await fork(manager, runs, flow, done.id)
    with pytest.raises(InvalidRequestError, match="has no node 'nope'"):
        await fork(manager, runs, flow, done.id, from_node="nope")
    newer = Workflow("flaky", version="2", input=Empty)
    with pytest.raises(InvalidRequestError, match="cannot be reused"):
        await fork(manager, runs, newer, done.id, from_node="parse")
    listed = await manager.list()
    assert len(listed.tasks) == 1  # nothing was created by a refusal


async def test_a_fork_of_a_vanished_source_stores_nothing(
    manager: TaskManager, store: TaskStore
) -> None:
    task = manager.draft("flaky", {})
    with pytest.raises(TaskNotFoundError):
        await run_store(store).fork_run(
            task, source=task.id, nodes=frozenset({"fetch"}), now=manager.clock.now()
        )
    with pytest.raises(TaskNotFoundError):
        await manager.get(task.id)


def test_downstream_follows_every_path() -> None:
    flow, _, _ = _flaky()
    assert downstream(flow, {"notes"}) == {"notes", "parse", "publish"}
    assert downstream(flow, {"fetch"}) == set(flow.nodes)
    assert downstream(flow, set()) == set()


async def test_a_cancelled_run_resumes_without_its_cancelled_nodes(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = Workflow("slow", version="1", input=Empty)
    started = anyio.Event()

    @flow.node()
    async def quick(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(deps=[quick])
    async def wait(ctx: NodeContext[Empty]) -> int:
        if ctx.attempt == 1 and not started.is_set():
            started.set()
            await anyio.sleep_forever()
        return ctx.output(quick) + 1

    async with running(manager, store, flow):
        task = await submit(manager, flow)
        with anyio.fail_after(20):
            await started.wait()
        await manager.cancel(task.id)
        await finish(manager, task)
        resumed = await fork(manager, run_store(store), flow, task.id)
        assert resumed.kept == ("quick",)
        assert (await finish(manager, resumed.task)).result == 2
