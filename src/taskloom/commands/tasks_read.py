"""``taskloom tasks list|show|result|watch``: reading tasks from the database."""

import sys
from datetime import UTC, datetime
from typing import Any

from taskloom.bootstrap import load_workflows
from taskloom.commands.arguments import ListArgs, ResultArgs, TaskArgs, TaskIdArgs
from taskloom.commands.base import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, CommandError
from taskloom.commands.common import (
    RECHECK_S,
    open_database,
    print_json,
    settings_from,
    task_json,
)
from taskloom.commands.durations import since
from taskloom.commands.render import (
    node_rows,
    node_table,
    span,
    task_facts,
    timeline,
    took,
    when,
)
from taskloom.commands.screen import print_table
from taskloom.engine.claims import WorkflowKey
from taskloom.engine.dag import Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.registry import workflow_for
from taskloom.engine.states import TaskState
from taskloom.engine.versions import (
    VersionLine,
    VersionStore,
    version_report,
    waiting_for_process,
)
from taskloom.engine.view import shape_of


def _workflows(args: TaskArgs) -> dict[str, Workflow[Any]]:
    return dict(load_workflows(settings_from(args.db, args.workflows)))


async def list_tasks(args: ListArgs) -> int:
    """Print a page of tasks; a run that waits for a workflow version no live process has
    says so in its status, and a last line names every such version (ADR 0039)."""
    async with open_database(args.db, read_only=True) as local:
        states = [TaskState(state) for state in args.state] if args.state else None
        page = await local.manager.list(
            states=states,
            limit=args.limit,
            cursor=args.cursor,
            names=None if args.workflow is None else [args.workflow],
            created_after=_since(args.since),
        )
        live, orphaned = await _versions(local.runs)
    now = datetime.now(UTC)
    if args.json:
        tasks = [
            {**task_json(task), "waiting_for_a_process": _waiting(task, live)}
            for task in page.tasks
        ]
        print_json({"tasks": tasks, "next_cursor": page.next_cursor})
        return EXIT_OK
    if not page.tasks:
        print("no tasks")
    narrow = sys.stdout.isatty()  # a terminal: fit the width; a pipe: every detail
    if page.tasks:
        print_table(
            ["ID", "WORKFLOW", "STATE", "CREATED", "TOOK", "STATUS"],
            [
                [
                    task.id,
                    task.name,
                    str(task.state),
                    when(task.created_at) if not narrow else f"{task.created_at:%m-%d %H:%M}",
                    took(task),
                    _status(task, live, now),
                ]
                for task in page.tasks
            ],
            squeeze={"STATUS"},
        )
    if page.next_cursor is not None:
        print(f"(more: --cursor {page.next_cursor})")
    for line in orphaned:
        waited = span((now - line.oldest).total_seconds()) if line.oldest else "?"
        runs = f"{line.unfinished} run{'s wait' if line.unfinished != 1 else ' waits'}"
        print(
            f"{runs} for a process that has {line.name} version {line.version} "
            f"(the oldest created {waited} ago): deploy that version, or move them with taskloom tasks "
            "upgrade"
        )
    return EXIT_OK


async def _versions(store: object) -> tuple[frozenset[WorkflowKey] | None, list[VersionLine]]:
    """The versions live processes have, and the stored versions no live process has
    (none of either when the store keeps no such records)."""
    if not isinstance(store, VersionStore):
        return None, []
    now = datetime.now(UTC)
    live = await store.live_versions(now)
    report = version_report((), live, await store.unfinished_versions(now))
    return live, [line for line in report if line.orphaned and line.version is not None]


def _waiting(task: Task, live: frozenset[WorkflowKey] | None) -> str | None:
    return waiting_for_process(task, live) if live is not None else None


def _status(task: Task, live: frozenset[WorkflowKey] | None, now: datetime) -> str:
    """Its status message, or what it waits for when no live process can run it."""
    waiting = _waiting(task, live)
    if waiting is None:
        return task.status_message or ""
    return f"{waiting} (for {span(max((now - task.updated_at).total_seconds(), 0.0))})"


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return since(text, datetime.now(UTC)).astimezone(UTC)
    except ValueError as error:
        raise CommandError(f"--since: {error}") from None


def _cut(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def show_task(args: TaskIdArgs) -> int:
    """Print a task, its phases and nodes, its child tasks and a timeline (with the state
    changes of its stored history); ``--json`` adds every attempt and history entry."""
    async with open_database(args.db, read_only=True) as local:
        task, changes = await local.manager.history(args.task_id)
        nodes = await local.runs.checkpoints(task.id)
        attempts = await local.runs.attempts(task.id)
        children = await _children(local.manager, task)
        live, _ = await _versions(local.runs)
    shape = shape_of(task, workflow_for(_workflows(args), task.name, task.workflow_version))
    records = node_rows(shape, task, nodes, attempts)
    if args.json:
        history = [attempt.model_dump(mode="json") for attempt in attempts]
        print_json(
            {
                "task": task_json(task),
                "waiting_for_a_process": _waiting(task, live),
                "nodes": records,
                "attempts": history,
                "children": [_child_json(task, child) for child in children],
                "history": [change.model_dump(mode="json") for change in changes],
            }
        )
        return EXIT_OK
    facts = [
        (key, _status(task, live, datetime.now(UTC)) if key == "status" else value)
        for key, value in task_facts(task)
    ]
    print_table(["", ""], [[key, value] for key, value in facts], wrap={""}, show_header=False)
    if records:
        print()
        print_table(*node_table(records), wrap={"NOTE"})
    if children:
        print()
        print(f"children ({len(children)}):")
        print_table(
            ["  NODE", "TASK", "WORKFLOW", "STATE", "TOOK"],
            [
                [
                    f"  {_child_node(task, child)}",
                    child.id,
                    child.name,
                    str(child.state),
                    took(child),
                ]
                for child in children
            ],
        )
    events = timeline(task, records, changes)
    if len(events) > 1:
        print()
        print("timeline:")
        print_table(["  AFTER", "EVENT"], [[f"  {at}", what] for at, what in events])
    return EXIT_OK


CHILDREN_SHOWN = 200
"""Child tasks listed by ``tasks show`` (the rest: ``tasks list --json``)."""


async def _children(manager: TaskManager, task: Task) -> list[Task]:
    page = await manager.list(parent_id=task.id, limit=CHILDREN_SHOWN)
    return sorted(page.tasks, key=lambda child: child.created_at)


def _child_node(parent: Task, child: Task) -> str:
    """The parent's node that started *child*, from its idempotency key (ADR 0026)."""
    key = child.idempotency_key or ""
    _, found, call = key.partition(f"{parent.id}:")
    return call.split("#child", 1)[0] if found and "#child" in call else "?"


def _child_json(parent: Task, child: Task) -> dict[str, Any]:
    return {
        "id": child.id,
        "workflow": child.name,
        "state": str(child.state),
        "node": _child_node(parent, child),
        "created_at": child.created_at.isoformat(),
        "updated_at": child.updated_at.isoformat(),
    }


async def task_result(args: ResultArgs) -> int:
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
