"""Child workflows across OS processes on one SQLite file (ADR 0026).

The parent runs in this process, its children in another (``children_worker``), and the
two share nothing but the file: the child's end, recorded on the parent in the child's
ending transaction, wakes the parent here (by the poll); the parent's cancel here cancels
the child in the same transaction, and the other process stops the child's running node
(by its heartbeat).
"""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.sqlite import SqliteTaskStore
from tests.contract.harness import finish, running
from tests.helpers import checkout_env, eventually
from tests.integration.children_worker import Number, leaf

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[2]

parent = Workflow("parent", version="1", input=Number)


@parent.node()
async def delegate(ctx: NodeContext[Number]) -> int:
    doubled: int = await ctx.child(leaf, {"x": ctx.input.x})
    return doubled + 1


@asynccontextmanager
async def _leaf_worker(db: Path) -> AsyncIterator[None]:
    command = [sys.executable, "-m", "tests.integration.children_worker", str(db)]
    process = await anyio.open_process(command, env=checkout_env())
    try:
        assert process.stdout is not None
        with anyio.fail_after(30):
            line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
        assert line == b"ready"
        yield
    finally:
        process.kill()
        with anyio.move_on_after(10, shield=True):
            await process.wait()


async def test_a_child_in_another_process_wakes_its_parent_and_dies_with_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tasks.db"
    async with SqliteTaskStore.open(db) as store, _leaf_worker(db):
        manager = TaskManager(store)
        async with running(manager, store, parent):
            done = await finish(manager, await submit(manager, parent, {"x": 20}))
            assert done.state is TaskState.COMPLETED, done.error
            assert done.result == 41

            task = await submit(manager, parent, {"x": -1})  # its child runs until cancelled

            async def child_running() -> bool:
                kids = (await manager.list(parent_id=task.id)).tasks
                if not kids:
                    return False
                return bool(await store.attempts(kids[0].id))

            await eventually(child_running, within_s=20)
            (kid,) = (await manager.list(parent_id=task.id)).tasks
            await manager.cancel(task.id)
            assert (await manager.get(kid.id)).state is TaskState.CANCELLED  # same write

            async def stopped_there() -> bool:
                outcomes = [a.outcome for a in await store.attempts(kid.id)]
                return outcomes == [AttemptOutcome.CANCELLED]

            await eventually(stopped_there, within_s=20)  # its heartbeat saw the cancel
