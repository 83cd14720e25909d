"""``taskloom tasks upgrade``: move unfinished runs to another loaded version (ADR 0039)."""

from typing import Any

from taskloom.bootstrap import load_workflows
from taskloom.commands.arguments import UpgradeArgs
from taskloom.commands.base import EXIT_FAILED, EXIT_OK, CommandError
from taskloom.commands.common import open_database, print_json, settings_from
from taskloom.engine.errors import (
    InvalidRequestError,
    TaskNotFoundError,
    TaskStateError,
    UnknownWorkflowError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import ACTIVE_STATES
from taskloom.engine.upgrade import Moved, move_to_version
from taskloom.engine.versions import VersionStore

_PAGE = 500


async def upgrade_tasks(args: UpgradeArgs) -> int:
    """Move each run named (or every unfinished run of ``--all-of NAME@VERSION``) to
    ``--to VERSION``; one line per run; exit 1 if any was refused."""
    if bool(args.task_ids) == bool(args.all_of):
        raise CommandError("name the runs to move: task IDs, or --all-of NAME@VERSION")
    workflows = load_workflows(settings_from(args.db, args.workflows))
    moved: list[Moved] = []
    refused: list[tuple[str, str]] = []
    async with open_database(args.db) as local:
        store = local.runs
        if not isinstance(store, VersionStore):
            raise CommandError("this database keeps no workflow versions")
        try:
            task_ids = list(args.task_ids) or await _all_of(local.manager, workflows, args)
        except UnknownWorkflowError as error:
            raise CommandError(f"{error}; load it with --workflows MODULE|FILE.py") from None
        for task_id in task_ids:
            try:
                moved.append(
                    await move_to_version(local.manager, store, workflows, task_id, args.to_version)
                )
            except UnknownWorkflowError as error:  # the same for every run: stop here
                raise CommandError(f"{error}; load it with --workflows MODULE|FILE.py") from None
            except (TaskNotFoundError, TaskStateError, InvalidRequestError) as error:
                if len(task_ids) == 1:
                    raise
                refused.append((task_id, str(error)))
    if args.json:
        print_json(
            {
                "moved": [_moved_json(each) for each in moved],
                "refused": [{"task": task, "error": reason} for task, reason in refused],
            }
        )
    else:
        for each in moved:
            kept = ", ".join(each.kept) or "none"
            print(
                f"moved {each.task.id} from {each.task.name} version {each.from_version} to "
                f"{each.task.workflow_version} (kept: {kept})"
            )
        for task_id, reason in refused:
            print(f"refused {task_id}: {reason}")
        if not moved and not refused:
            print(f"no unfinished runs of {args.all_of}")
    return EXIT_FAILED if refused else EXIT_OK


async def _all_of(
    manager: TaskManager, workflows: WorkflowRegistry, args: UpgradeArgs
) -> list[str]:
    """The unfinished runs of ``--all-of NAME@VERSION``, oldest first."""
    name, at, version = str(args.all_of).rpartition("@")
    if not at or not name or not version:
        raise CommandError(f"--all-of {args.all_of}: write NAME@VERSION, e.g. vflow@1")
    if name not in workflows:
        raise CommandError(f"--all-of {args.all_of}: no workflow {name!r} is loaded")
    workflows.version(name, args.to_version)  # refuse an unknown target before anything
    found: list[str] = []
    cursor = None
    while True:
        page = await manager.list(
            states=sorted(ACTIVE_STATES), names=[name], limit=_PAGE, cursor=cursor
        )
        found += [task.id for task in page.tasks if task.workflow_version == version]
        cursor = page.next_cursor
        if cursor is None:
            return found[::-1]


def _moved_json(moved: Moved) -> dict[str, Any]:
    return {
        "task": moved.task.id,
        "workflow": moved.task.name,
        "from_version": moved.from_version,
        "to_version": moved.task.workflow_version,
        "kept": list(moved.kept),
    }
