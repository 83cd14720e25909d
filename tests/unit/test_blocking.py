"""Blocking and CPU-bound code in a node: a cancel ends the thread or kills the process."""

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow, check_cancelled
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import InMemoryTaskStore
from tests.contract.harness import finish, running, until_state
from tests.helpers import eventually


class PidFile(BaseModel):
    path: str = ""


def spin_forever(pid_file: str) -> int:
    """Burn a core until killed (a worker process's function: module level, picklable)."""
    Path(pid_file).write_text(str(os.getpid()))
    while True:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())


def _has_text(path: Path) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        file = anyio.Path(path)
        return await file.exists() and bool(await file.read_text())

    return check


def _dead(pid: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not _alive(pid)

    return check


async def test_a_cancel_ends_the_thread_of_run_blocking() -> None:
    started, ended = threading.Event(), threading.Event()
    flow = Workflow("spinner", version="1", input=PidFile)

    def spin() -> None:
        started.set()
        try:
            while True:
                check_cancelled()
        finally:
            ended.set()

    @flow.node()
    async def work(ctx: NodeContext[PidFile]) -> None:
        await ctx.run_blocking(spin)

    store = InMemoryTaskStore()
    manager = TaskManager(store)
    async with running(manager, store, flow):
        task = await submit(manager, flow, {})
        assert await anyio.to_thread.run_sync(started.wait, 10)
        await manager.cancel(task.id)
        assert await anyio.to_thread.run_sync(ended.wait, 10), "the thread kept running"
        assert (await finish(manager, task)).state is TaskState.CANCELLED


def test_check_cancelled_does_nothing_outside_a_worker_thread() -> None:
    check_cancelled()  # a function written for run_blocking can be called directly


async def test_a_cancel_kills_the_process_of_run_in_process(tmp_path: Path) -> None:
    flow = Workflow("burner", version="1", input=PidFile)

    @flow.node()
    async def work(ctx: NodeContext[PidFile]) -> int:
        return await ctx.run_in_process(spin_forever, ctx.input.path)

    pid_file = tmp_path / "pid"
    store = InMemoryTaskStore()
    manager = TaskManager(store)
    async with running(manager, store, flow):
        task = await submit(manager, flow, {"path": str(pid_file)})
        await until_state(manager, task, TaskState.RUNNING)
        await eventually(_has_text(pid_file), within_s=30)  # a file the child writes
        pid = int(pid_file.read_text())
        assert _alive(pid)
        await manager.cancel(task.id)
        assert (await finish(manager, task)).state is TaskState.CANCELLED
    await eventually(_dead(pid))  # a killed process is reaped soon after, not at once
