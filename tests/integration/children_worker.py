"""A worker process for test_children_processes.py: runs ``leaf`` children only.

``python -m tests.integration.children_worker DB``: prints ``ready`` once it claims, then
runs until killed.
"""

import sys

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.sqlite import SqliteTaskStore

SETTINGS = WorkerSettings(poll_s=0.05, lease_s=1.5, progress_interval_s=0)


class Number(BaseModel):
    x: int


leaf = Workflow("leaf", version="1", input=Number)


@leaf.node()
async def double(ctx: NodeContext[Number]) -> int:
    """Doubles a number; runs until cancelled for a negative one."""
    if ctx.input.x < 0:
        await anyio.sleep_forever()
    return ctx.input.x * 2


async def main(path: str) -> None:
    async with SqliteTaskStore.open(path) as store:
        worker = Worker(TaskManager(store), {leaf.name: leaf}, settings=SETTINGS)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            print("ready", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
