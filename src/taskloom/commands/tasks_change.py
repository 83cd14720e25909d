"""``taskloom tasks cancel|answer|resume``: changing tasks in the database."""

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from taskloom.bootstrap import load_workflows, open_engine
from taskloom.commands.common import (
    EXIT_OK,
    CommandError,
    Local,
    add_settings,
    env,
    env_flag,
    open_database,
    print_json,
    read_json,
    settings_from,
    task_json,
)
from taskloom.commands.follow import follow
from taskloom.engine.dag import Workflow
from taskloom.engine.fork import fork
from taskloom.engine.registry import WorkflowRegistry
from taskloom.observability import standard_observer


def register(actions: "argparse._SubParsersAction[Any]") -> None:
    """Add the changing actions of ``tasks``."""
    cancel = actions.add_parser("cancel", help="cancel a task that has not finished")
    cancel.add_argument("task_id", metavar="ID", help="the task's id")
    cancel.add_argument(
        "--reason",
        default=env("REASON", "cancelled by the operator"),
        help="shown as the task's status (env TASKLOOM_REASON)",
    )
    cancel.set_defaults(handler=cancel_task)
    answer = actions.add_parser("answer", help="answer the question a task waits on")
    answer.add_argument("task_id", metavar="ID", help="the task's id")
    answer.add_argument("answer", metavar="JSON|@FILE", help="the answer, as JSON")
    answer.add_argument(
        "--key",
        default=env("KEY"),
        help="which question, when several are pending (env TASKLOOM_KEY)",
    )
    answer.set_defaults(handler=answer_task)
    resume = actions.add_parser(
        "resume",
        help="run a failed or cancelled task again as a new task, keeping its completed nodes",
        description="Create a new task with the same workflow, version and arguments. Nodes "
        "that completed are kept; the failed ones (or --from NODE) and every node after them "
        "run again. The old task is left as it was.",
    )
    resume.add_argument("task_id", metavar="ID", help="the finished task's id")
    resume.add_argument(
        "--from",
        dest="from_node",
        default=env("FROM"),
        metavar="NODE",
        help="run this node and its dependents again even if they completed (env TASKLOOM_FROM)",
    )
    resume.add_argument(
        "--run",
        action="store_true",
        default=env_flag("RUN"),
        help="run the new task here with live progress, as `taskloom run` does "
        "(env TASKLOOM_RUN=1); otherwise a worker or server on this database runs it",
    )
    add_settings(resume)
    resume.set_defaults(handler=resume_task)


async def cancel_task(args: argparse.Namespace) -> int:
    """Cancel a task; its nodes stop wherever they run."""
    async with open_database(args.db) as local:
        task = await local.manager.get(args.task_id)
        if task.is_terminal:
            raise CommandError(f"task {task.id} has already ended ({task.state})")
        task = await local.manager.cancel(task.id, reason=args.reason)
    if args.json:
        print_json(task_json(task))
    else:
        print(f"Cancelled task {task.id}; its running nodes stop within seconds.")
    return EXIT_OK


async def answer_task(args: argparse.Namespace) -> int:
    """Answer a pending question; the task runs on."""
    value = read_json(args.answer, "the answer")
    async with open_database(args.db) as local:
        task = await local.manager.get(args.task_id)
        pending = list(task.input_requests)
        if not pending:
            raise CommandError(f"task {task.id} is not waiting for an answer ({task.state})")
        key = args.key
        if key is None:
            if len(pending) > 1:
                raise CommandError(
                    f"task {task.id} asks {len(pending)} questions; choose one with --key "
                    f"({', '.join(pending)})"
                )
            key = pending[0]
        task = await local.manager.provide_input(task.id, key, value)
    if args.json:
        print_json(task_json(task))
    else:
        print(f"Answered {key!r}; task {task.id} is {task.state}.")
    return EXIT_OK


@asynccontextmanager
async def _opened(args: argparse.Namespace, workflow: Workflow[Any]) -> AsyncIterator[Local]:
    """The database, with a worker for *workflow* when the task is to run here."""
    if not args.run:
        async with open_database(args.db) as local:
            yield local
        return
    settings = settings_from(args, run_sweeper=False)
    only = WorkflowRegistry({workflow.name: workflow})
    quiet = standard_observer(logs=False)  # the progress view says it all
    async with open_engine(settings, workflows=only, observer=quiet) as engine:
        yield Local(manager=engine.manager, runs=engine.runs)


async def resume_task(args: argparse.Namespace) -> int:
    """Fork a finished task into a new one that keeps the completed nodes."""
    workflows = load_workflows(settings_from(args))
    async with open_database(args.db) as local:
        source = await local.manager.get(args.task_id)
    if source.name not in workflows:
        raise CommandError(
            f"task {source.id} ran workflow {source.name!r}, which is not loaded "
            "(load it with --workflows MODULE)"
        )
    workflow = workflows[source.name]
    async with _opened(args, workflow) as local:
        forked = await fork(
            local.manager, local.runs, workflow, source.id, from_node=args.from_node
        )
        if args.json and not args.run:
            print_json(
                {
                    "task": task_json(forked.task),
                    "resumes": source.id,
                    "kept": list(forked.kept),
                    "rerun": list(forked.rerun),
                }
            )
            return EXIT_OK
        print(f"Task {forked.task.id} resumes task {source.id}.")
        print(f"  kept (not run again): {', '.join(forked.kept) or 'none'}")
        print(f"  runs again:           {', '.join(forked.rerun)}")
        if not args.run:
            print("  A worker on this database runs it (taskloom worker, or taskloom serve);")
            print(f"  follow it with: taskloom tasks watch {forked.task.id}")
            return EXIT_OK
        return await follow(local.manager, local.runs, workflow, forked.task, on_interrupt="cancel")
