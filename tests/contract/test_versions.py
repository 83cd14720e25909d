"""Workflow versions side by side (ADR 0039), on every store: a run stays on the version
it started with, and a process claims only the versions it has loaded."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import InvalidRequestError, TaskStateError, UnknownWorkflowError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.upgrade import move_to_version
from taskloom.engine.versions import VersionStore
from taskloom.engine.worker import Worker
from tests.contract.harness import FAST, finish, run_store, until_state

MINUTE = timedelta(minutes=1)


class Empty(BaseModel):
    pass


class Confirm(BaseModel):
    go: bool


def _vflow(version: str, calls: list[str] | None = None) -> Workflow[Empty]:
    """vflow at *version*: it asks a question, then says which version ran each node."""
    flow = Workflow("vflow", version=version, input=Empty)

    @flow.node()
    async def ask(ctx: NodeContext[Empty]) -> str:
        if calls is not None:
            calls.append(f"ask {version}")
        await ctx.ask("Go on?", Confirm)
        return f"asked by {version}"

    @flow.node(deps=[ask])
    async def finish_(ctx: NodeContext[Empty]) -> str:
        return f"{ctx.output(ask)}, finished by {version}"

    return flow


def _plain(version: str) -> Workflow[Empty]:
    flow = Workflow("vflow", version=version, input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> str:
        return f"version {version}"

    return flow


def _registry(*flows: Workflow[Any]) -> WorkflowRegistry:
    registry = WorkflowRegistry()
    for flow in flows:
        registry.register(flow)
    return registry


@asynccontextmanager
async def _worker(manager: TaskManager, workflows: WorkflowRegistry) -> AsyncIterator[Worker]:
    worker = Worker(manager, workflows, settings=FAST)
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield worker
        task_group.cancel_scope.cancel()


async def _answer(manager: TaskManager, task: Task) -> None:
    (key,) = (await manager.get(task.id)).input_requests
    await manager.provide_input(task.id, key, {"go": True})


async def test_two_versions_side_by_side_new_calls_get_the_newest(
    manager: TaskManager, store: TaskStore
) -> None:
    both = _registry(_plain("1"), _plain("2"))
    old = await manager.create("vflow", {}, workflow_version="1")
    new = await submit(manager, both["vflow"])
    assert new.workflow_version == "2"
    async with _worker(manager, both):
        assert (await finish(manager, old)).result == "version 1"
        assert (await finish(manager, new)).result == "version 2"


async def test_a_run_resumes_on_its_own_version_after_a_deploy(
    manager: TaskManager, store: TaskStore
) -> None:
    """Started on version 1, it waits for an answer across a deploy that adds version 2:
    its remaining nodes (and the re-run of the asking node) run version 1's code."""
    calls: list[str] = []
    async with _worker(manager, _registry(_vflow("1", calls))):
        task = await submit(manager, _vflow("1"))
        await until_state(manager, task, TaskState.INPUT_REQUIRED)
    deployed = _registry(_vflow("1", calls), _vflow("2", calls))
    async with _worker(manager, deployed):
        fresh = await submit(manager, deployed["vflow"])
        await until_state(manager, fresh, TaskState.INPUT_REQUIRED)
        await _answer(manager, task)
        await _answer(manager, fresh)
        assert (await finish(manager, task)).result == "asked by 1, finished by 1"
        assert (await finish(manager, fresh)).result == "asked by 2, finished by 2"
    assert sorted(set(calls)) == ["ask 1", "ask 2"]


async def test_claims_skip_the_versions_the_process_lacks(
    manager: TaskManager, store: TaskStore
) -> None:
    runs = run_store(store)
    old = await manager.create("vflow", {}, workflow_version="1")
    new = await manager.create("vflow", {}, workflow_version="2")

    async def claim(*workflows: str | tuple[str, str]) -> list[str]:
        now = manager.clock.now()
        claimed = await runs.claim_runs(
            worker="w",
            workflows=frozenset(workflows),
            now=now,
            lease_for=timedelta(seconds=30),
            limit=10,
            start=claim_start(now),
        )
        return [run.task.id for run in claimed]

    assert await claim(("vflow", "3"), ("other", "1")) == []
    assert await claim(("vflow", "2")) == [new.id]
    assert await claim(("vflow", "1"), ("vflow", "2")) == [old.id]


async def test_a_process_without_the_version_leaves_the_run_waiting_not_failed(
    manager: TaskManager, store: TaskStore
) -> None:
    old = await manager.create("vflow", {}, workflow_version="1")
    only_new = _registry(_plain("2"))
    async with _worker(manager, only_new):
        # A newer run completes: the worker has looked at (and skipped) the older one.
        assert (await finish(manager, await submit(manager, only_new["vflow"]))).result == (
            "version 2"
        )
        says = "waiting for a process that has vflow version 1"
        with anyio.fail_after(10), manager.subscribe([old.id]) as changes:
            waiting = await manager.get(old.id)
            while waiting.status_message != says:  # the worker's next record writes it
                waiting = await changes.receive()
    assert waiting.state is TaskState.QUEUED
    async with _worker(manager, _registry(_plain("1"), _plain("2"))):
        assert (await finish(manager, old)).result == "version 1"


async def test_the_store_knows_which_versions_live_processes_have(
    manager: TaskManager, store: TaskStore
) -> None:
    versions = cast(VersionStore, store)
    now = manager.clock.now()
    await versions.record_loaded("a", [("vflow", "1"), ("vflow", "2")], now, now + MINUTE)
    await versions.record_loaded("b", [("vflow", "2")], now, now + MINUTE)
    assert await versions.live_versions(now) == {("vflow", "1"), ("vflow", "2")}
    await versions.forget_process("a")
    assert await versions.live_versions(now) == {("vflow", "2")}
    assert await versions.live_versions(now + 2 * MINUTE) == frozenset()  # b's record lapsed


async def test_the_store_counts_unfinished_runs_by_version(
    manager: TaskManager, store: TaskStore
) -> None:
    versions = cast(VersionStore, store)
    first = await manager.create("vflow", {}, workflow_version="1")
    await manager.create("vflow", {}, workflow_version="10")
    await manager.create("vflow", {}, workflow_version="1")
    done = await manager.create("vflow", {}, workflow_version="2")
    await manager.cancel(done.id)
    found = await versions.unfinished_versions(manager.clock.now())
    assert [(each.name, each.version, each.unfinished) for each in found] == [
        ("vflow", "1", 2),
        ("vflow", "10", 1),
    ]
    assert found[0].oldest == first.created_at


async def test_a_worker_records_its_versions_while_it_runs(
    manager: TaskManager, store: TaskStore
) -> None:
    versions = cast(VersionStore, store)
    async with _worker(manager, _registry(_plain("1"), _plain("2"))):
        live = await versions.live_versions(manager.clock.now())
        assert live == {("vflow", "1"), ("vflow", "2")}
    assert await versions.live_versions(manager.clock.now()) == frozenset()


def _upgradable(version: str, calls: list[str], first_type: type = int) -> Workflow[Empty]:
    """vflow whose first node computes a number, then asks before its last node."""
    flow = Workflow("vflow", version=version, input=Empty)

    @flow.node()
    async def compute(ctx: NodeContext[Empty]) -> first_type:  # type: ignore[valid-type]
        calls.append(f"compute {version}")
        return 21

    @flow.node(deps=[compute])
    async def report(ctx: NodeContext[Empty]) -> str:
        calls.append(f"report {version}")
        await ctx.ask("Report?", Confirm)
        return f"{ctx.output(compute)} reported by {version}"

    return flow


class Shaped(BaseModel):
    value: str


async def test_an_upgrade_keeps_the_completed_nodes_and_runs_the_rest_on_the_new_code(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[str] = []
    old = _upgradable("1", calls)
    async with _worker(manager, _registry(old)):
        task = await submit(manager, old)
        await until_state(manager, task, TaskState.INPUT_REQUIRED)
    both = _registry(old, _upgradable("2", calls))
    moved = await move_to_version(manager, cast(VersionStore, store), both, task.id, "2")
    assert moved.kept == ("compute",)
    assert moved.from_version == "1"
    assert moved.task.workflow_version == "2"
    assert "moved from vflow version 1 to 2" in (moved.task.status_message or "")
    _, history = await manager.history(task.id)
    assert history[-1].cause == "upgraded"
    async with _worker(manager, _registry(_upgradable("2", calls))):
        await until_state(manager, task, TaskState.INPUT_REQUIRED)
        await _answer(manager, task)
        assert (await finish(manager, task)).result == "21 reported by 2"
    assert calls.count("compute 1") == 1
    assert "compute 2" not in calls


async def test_an_upgraded_run_is_drawn_with_its_new_version_shape(
    manager: TaskManager, store: TaskStore
) -> None:
    """Review of issue 23 x 26: the stored shape (ADR 0042) follows the run to the new
    version, so `tasks show` and the dashboard draw the nodes that will run."""
    calls: list[str] = []
    old = _upgradable("1", calls)
    async with _worker(manager, _registry(old)):
        task = await submit(manager, old)
        await until_state(manager, task, TaskState.INPUT_REQUIRED)
    new = _upgradable("2", calls)

    @new.node(deps=["report"])
    async def publish(ctx: NodeContext[Empty]) -> str:
        return "published"

    moved = await move_to_version(
        manager, cast(VersionStore, store), _registry(old, new), task.id, "2"
    )
    assert moved.task.shape is not None
    assert [node.name for node in moved.task.shape.nodes] == ["compute", "report", "publish"]
    stored = await manager.get(task.id)
    assert stored.shape == new.shape()


async def test_an_upgrade_whose_kept_outputs_do_not_fit_is_refused_naming_the_node(
    manager: TaskManager, store: TaskStore
) -> None:
    calls: list[str] = []
    old = _upgradable("1", calls)
    async with _worker(manager, _registry(old)):
        task = await submit(manager, old)
        await until_state(manager, task, TaskState.INPUT_REQUIRED)
    before = await manager.get(task.id)
    both = _registry(old, _upgradable("2", calls, first_type=Shaped))
    with pytest.raises(InvalidRequestError) as refused:
        await move_to_version(manager, cast(VersionStore, store), both, task.id, "2")
    assert str(refused.value).startswith(
        f"task {task.id}: node 'compute''s output from version 1 does not fit version 2's type"
    )
    assert await manager.get(task.id) == before  # nothing stored changed
    with pytest.raises(UnknownWorkflowError, match="vflow version 7 is not loaded"):
        await move_to_version(manager, cast(VersionStore, store), both, task.id, "7")
    assert await manager.get(task.id) == before


async def test_a_run_a_worker_holds_is_not_moved(manager: TaskManager, store: TaskStore) -> None:
    task = await manager.create("vflow", {}, workflow_version="1")
    now = manager.clock.now()
    await run_store(store).claim_runs(
        worker="busy",
        workflows=frozenset({("vflow", "1")}),
        now=now,
        lease_for=timedelta(seconds=30),
        limit=1,
        start=claim_start(now),
    )
    both = _registry(_plain("1"), _plain("2"))
    with pytest.raises(TaskStateError, match="is running in worker busy"):
        await move_to_version(manager, cast(VersionStore, store), both, task.id, "2")
    assert (await manager.get(task.id)).workflow_version == "1"


def _child(version: str) -> Workflow[Empty]:
    flow = Workflow("vchild", version=version, input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> str:
        return f"child {version}"

    return flow


async def test_a_child_records_the_version_its_parents_code_starts(
    manager: TaskManager, store: TaskStore
) -> None:
    """The parent's version 1 code starts version 1 of the child, though the process
    also has (and new calls get) version 2 of both."""
    old_child, new_child = _child("1"), _child("2")

    def parent(version: str, child: Workflow[Empty]) -> Workflow[Empty]:
        flow = Workflow("vparent", version=version, input=Empty)

        @flow.node()
        async def call(ctx: NodeContext[Empty]) -> Any:
            return await ctx.child(child, {})

        return flow

    task = await manager.create("vparent", {}, workflow_version="1")
    everything = _registry(parent("1", old_child), parent("2", new_child), old_child, new_child)
    async with _worker(manager, everything):
        assert (await finish(manager, task)).result == "child 1"
        fresh = await submit(manager, everything["vparent"])
        assert (await finish(manager, fresh)).result == "child 2"
    children = (await manager.list(parent_id=task.id)).tasks
    assert [child.workflow_version for child in children] == ["1"]
