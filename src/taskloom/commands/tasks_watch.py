"""``taskloom tasks watch``: following a task, whichever process runs it."""

from contextlib import aclosing
from typing import Any

from taskloom.bootstrap import load_workflows
from taskloom.commands.arguments import TaskArgs, TaskIdArgs
from taskloom.commands.common import RECHECK_S, Local, again_flags, open_database, settings_from
from taskloom.commands.follow import exit_code, follow
from taskloom.engine.dag import Workflow
from taskloom.engine.models import Task
from taskloom.engine.registry import workflow_for


def _workflows(args: TaskArgs) -> dict[str, Workflow[Any]]:
    return dict(load_workflows(settings_from(args.db, args.workflows)))


async def watch_task(args: TaskIdArgs) -> int:
    """Follow a task (run by any process on this database) until it ends."""
    async with open_database(args.db, read_only=True) as local:
        task = await local.manager.get(args.task_id)
        workflow = workflow_for(_workflows(args), task.name, task.workflow_version)
        if args.json:
            return await _watch_json(local, task)
        return await follow(
            local.manager,
            local.runs,
            workflow,
            task,
            on_interrupt="detach",
            flags=again_flags(args),
        )


async def _watch_json(local: Local, task: Task) -> int:
    """One JSON object per line for each new version of the task."""
    async with aclosing(local.manager.watch(task.id, recheck_every=RECHECK_S)) as versions:
        async for current in versions:
            print(current.model_dump_json(), flush=True)
            task = current
    return exit_code(task)
