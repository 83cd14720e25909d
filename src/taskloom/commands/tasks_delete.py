"""``taskloom tasks delete|purge``: removing finished tasks (and their runs) for good."""

from datetime import UTC, datetime

from taskloom.commands.arguments import DeleteArgs, PurgeArgs
from taskloom.commands.base import EXIT_OK, CommandError
from taskloom.commands.common import again_flags, open_store, print_json, show
from taskloom.commands.render import when
from taskloom.engine.errors import TaskNotFoundError
from taskloom.engine.models import TaskId
from taskloom.engine.states import TERMINAL_STATES, TaskState

PURGE_BATCH = 1000
"""Tasks deleted per transaction by ``purge`` (short transactions leave room to others)."""


async def delete_tasks(args: DeleteArgs) -> int:
    """Delete the given finished tasks, all or none."""
    ids = [TaskId(task_id) for task_id in dict.fromkeys(args.task_ids)]
    async with open_store(args.db) as store:
        now = datetime.now(UTC)
        for task_id in ids:
            task = await store.get(task_id, now)
            if task is None:
                raise TaskNotFoundError(task_id)
            if not task.is_terminal:
                again = again_flags(args)
                raise CommandError(
                    f"task {task_id} has not finished ({task.state}); "
                    f"cancel it first: taskloom tasks cancel {task_id}{again}"
                )
        deleted = await store.delete_finished(task_ids=ids, limit=len(ids))
    return show(args.json, {"deleted": deleted, "task_ids": ids}, f"deleted {deleted} task(s)")


async def purge_tasks(args: PurgeArgs) -> int:
    """Delete, in batches, the tasks that finished before now minus ``--older-than``."""
    states = frozenset(TaskState(state) for state in args.state) or TERMINAL_STATES
    before = datetime.now(UTC) - args.older_than
    deleted = 0
    async with open_store(args.db) as store:
        while True:
            count = await store.delete_finished(
                finished_before=before, states=states, limit=PURGE_BATCH
            )
            deleted += count
            if count < PURGE_BATCH:
                break
    if args.json:
        print_json({"deleted": deleted, "finished_before": before.isoformat()})
    else:
        shown = ", ".join(sorted(state.value for state in states))
        print(f"deleted {deleted} task(s) ({shown}) that finished before {when(before)}")
    return EXIT_OK
