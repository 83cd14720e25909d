"""``taskloom tasks list|show|result|watch``: reading tasks from the database."""

import argparse
import sys
from contextlib import aclosing
from typing import Any

from taskloom.bootstrap import load_workflows
from taskloom.commands.common import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_OK,
    CommandError,
    Local,
    env,
    env_flag,
    env_int,
    open_database,
    print_json,
    settings_from,
    task_json,
)
from taskloom.commands.follow import RECHECK_S, exit_code, follow
from taskloom.commands.render import node_lines, node_rows, table, task_lines, when
from taskloom.engine.dag import Workflow
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState


def register(actions: "argparse._SubParsersAction[Any]") -> None:
    """Add the reading actions of ``tasks``."""
    listing = actions.add_parser("list", help="tasks, newest first")
    listing.add_argument(
        "--state",
        action="append",
        choices=[state.value for state in TaskState],
        default=[state for state in (env("STATE") or "").replace(",", " ").split() if state],
        help="only tasks in this state; repeat for several (env TASKLOOM_STATE, comma-separated)",
    )
    listing.add_argument(
        "--limit",
        type=int,
        default=env_int("LIMIT", 50),
        help="at most this many (1-1000; env TASKLOOM_LIMIT; default %(default)s)",
    )
    listing.add_argument(
        "--cursor",
        default=env("CURSOR"),
        help="continue after the page that gave this next_cursor (env TASKLOOM_CURSOR)",
    )
    listing.set_defaults(handler=list_tasks)
    show = actions.add_parser("show", help="a task, its nodes and their attempts")
    show.set_defaults(handler=show_task)
    result = actions.add_parser(
        "result",
        help="a finished task's result (exit 1 if it failed, 130 if cancelled)",
    )
    result.add_argument(
        "--wait",
        action="store_true",
        default=env_flag("WAIT"),
        help="wait for the task to finish (env TASKLOOM_WAIT=1)",
    )
    result.set_defaults(handler=task_result)
    watch = actions.add_parser(
        "watch",
        help="follow a task's progress until it ends (Ctrl-C stops watching, not the task)",
    )
    watch.set_defaults(handler=watch_task)
    for parser in (show, result, watch):
        parser.add_argument("task_id", metavar="ID", help="the task's id")


def _workflows(args: argparse.Namespace) -> dict[str, Workflow[Any]]:
    return dict(load_workflows(settings_from(args)))


async def list_tasks(args: argparse.Namespace) -> int:
    """Print a page of tasks."""
    async with open_database(args.db, read_only=True) as local:
        states = [TaskState(state) for state in args.state] if args.state else None
        page = await local.manager.list(states=states, limit=args.limit, cursor=args.cursor)
    if args.json:
        tasks = [task_json(task) for task in page.tasks]
        print_json({"tasks": tasks, "next_cursor": page.next_cursor})
        return EXIT_OK
    if not page.tasks:
        print("no tasks")
        return EXIT_OK
    rows = [["ID", "WORKFLOW", "STATE", "UPDATED", "STATUS"]]
    rows += [
        [task.id, task.name, task.state, when(task.updated_at), _cut(task.status_message or "")]
        for task in page.tasks
    ]
    print("\n".join(table(rows)))
    if page.next_cursor is not None:
        print(f"(more: --cursor {page.next_cursor})")
    return EXIT_OK


def _cut(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def show_task(args: argparse.Namespace) -> int:
    """Print a task, its nodes and (with ``--json``) every attempt."""
    async with open_database(args.db, read_only=True) as local:
        task = await local.manager.get(args.task_id)
        nodes = await local.runs.checkpoints(task.id)
        attempts = await local.runs.attempts(task.id)
    records = node_rows(_workflows(args).get(task.name), nodes, attempts)
    if args.json:
        history = [attempt.model_dump(mode="json") for attempt in attempts]
        print_json({"task": task_json(task), "nodes": records, "attempts": history})
        return EXIT_OK
    print("\n".join(task_lines(task)))
    if records:
        print()
        print("\n".join(node_lines(records)))
    return EXIT_OK


async def task_result(args: argparse.Namespace) -> int:
    """Print a finished task's result; say why there is none otherwise."""
    async with open_database(args.db, read_only=True) as local:
        task = await local.manager.get(args.task_id)
        if not task.is_terminal and args.wait:
            task = await local.manager.wait_until_terminal(task.id, recheck_every=RECHECK_S)
    if not task.is_terminal:
        raise CommandError(
            f"task {task.id} has not finished ({task.state}); pass --wait to wait for it"
        )
    if args.json:
        print_json(
            {
                "task_id": task.id,
                "state": task.state,
                "result": task.result,
                "error": task.error.model_dump(mode="json") if task.error else None,
            }
        )
    elif task.state is TaskState.COMPLETED:
        print_json(task.result)
    if task.state is TaskState.FAILED:
        reason = task.error.message if task.error is not None else "no reason recorded"
        print(f"taskloom: task {task.id} failed: {reason}", file=sys.stderr)
        return EXIT_FAILED
    if task.state is TaskState.CANCELLED:
        print(
            f"taskloom: task {task.id} was cancelled: {task.status_message or 'cancelled'}",
            file=sys.stderr,
        )
        return EXIT_CANCELLED
    return EXIT_OK


async def watch_task(args: argparse.Namespace) -> int:
    """Follow a task (run by any process on this database) until it ends."""
    async with open_database(args.db, read_only=True) as local:
        task = await local.manager.get(args.task_id)
        workflow = _workflows(args).get(task.name)
        if args.json:
            return await _watch_json(local, task)
        return await follow(local.manager, local.runs, workflow, task, on_interrupt="detach")


async def _watch_json(local: Local, task: Task) -> int:
    """One JSON object per line for each new version of the task."""
    async with aclosing(local.manager.watch(task.id, recheck_every=RECHECK_S)) as versions:
        async for current in versions:
            print(current.model_dump_json(), flush=True)
            task = current
    return exit_code(task)
