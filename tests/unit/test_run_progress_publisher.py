"""RunProgress.publish: coalesced writes, and a stop that never cuts a write off."""

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.progress import ProgressWrite, RunProgress


class Empty(BaseModel):
    pass


def _flow() -> Workflow[Empty]:
    flow = Workflow("two", version="1", input=Empty)

    @flow.node()
    async def first(ctx: NodeContext[Empty]) -> int:
        return 1

    @flow.node(deps=[first])
    async def second(ctx: NodeContext[Empty]) -> int:
        return 2

    return flow


def _recorder() -> tuple[list[str], ProgressWrite]:
    """A progress write that records each message, and the messages."""
    written: list[str] = []

    async def write(completed: float, total: float, message: str) -> None:
        written.append(message)

    return written, write


@pytest.mark.anyio
async def test_stop_lets_a_write_under_way_finish_and_then_ends_the_publisher() -> None:
    progress = RunProgress(_flow())
    writing, release = anyio.Event(), anyio.Event()
    written: list[str] = []
    finished = False

    async def write(completed: float, total: float, message: str) -> None:
        writing.set()
        await release.wait()
        written.append(message)

    async def publisher() -> None:
        nonlocal finished
        await progress.publish(write, interval_s=3600)
        finished = True

    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(publisher)
            progress.status("busy")
            await writing.wait()
            progress.stop()
            await anyio.wait_all_tasks_blocked()
            assert not finished  # still writing: not cancelled
            release.set()
    assert finished
    assert written == ["busy"]


@pytest.mark.anyio
async def test_stop_ends_a_publisher_that_waits_out_its_interval_at_once() -> None:
    progress = RunProgress(_flow())
    written, write = _recorder()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(progress.publish, write, 3600)
            progress.status("one")
            await anyio.wait_all_tasks_blocked()  # written, now waiting out the hour
            progress.status("two")  # coalesced: due only after the interval
            progress.stop()
    assert written == ["one"]


@pytest.mark.anyio
async def test_the_publisher_starts_with_the_first_change_and_never_without_one() -> None:
    progress = RunProgress(_flow())
    written, write = _recorder()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            progress.publish_in(task_group, write, 3600)
            await anyio.wait_all_tasks_blocked()
            assert written == []  # nothing said, no task started
            progress.status("first")
            await anyio.wait_all_tasks_blocked()
            progress.stop()
    assert written == ["first"]

    quiet = RunProgress(_flow())
    async with anyio.create_task_group() as task_group:
        quiet.publish_in(task_group, write, 3600)
        quiet.stop()
        quiet.status("after the end")  # a stopped publisher is never started
    assert written == ["first"]
