"""``taskloom tasks cancel|answer|resume``: changing tasks in the database."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from taskloom.bootstrap import load_workflows, open_engine
from taskloom.commands.arguments import AnswerArgs, CancelArgs, ResumeArgs
from taskloom.commands.base import EXIT_OK, CommandError
from taskloom.commands.common import (
    Local,
    again_flags,
    open_database,
    print_json,
    read_json,
    settings_from,
    show,
    task_json,
)
from taskloom.commands.follow import follow
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import UnknownWorkflowError
from taskloom.engine.fork import fork
from taskloom.engine.registry import WorkflowRegistry
from taskloom.observability import standard_observer


async def cancel_task(args: CancelArgs) -> int:
    """Cancel a task; its nodes stop wherever they run."""
    async with open_database(args.db) as local:
        task = await local.manager.get(args.task_id)
        if task.is_terminal:
            raise CommandError(f"task {task.id} has already ended ({task.state})")
        task = await local.manager.cancel(task.id, reason=args.reason)
    return show(
        args.json,
        task_json(task),
        f"Cancelled task {task.id}; its running nodes stop within seconds.",
    )


async def answer_task(args: AnswerArgs) -> int:
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
    return show(args.json, task_json(task), f"Answered {key!r}; task {task.id} is {task.state}.")


@asynccontextmanager
async def _opened(args: ResumeArgs, workflow: Workflow[Any]) -> AsyncIterator[Local]:
    """The database, with a worker for *workflow* when the task is to run here."""
    if not args.run:
        async with open_database(args.db) as local:
            yield local
        return
    settings = settings_from(  # the process is taskloom's until the run ends (ADR 0061)
        args.db, args.workflows, args.settings, run_sweeper=False, freeze_start_up=True
    )
    only = WorkflowRegistry({workflow.name: workflow})
    quiet = standard_observer(logs=False)  # the progress view says it all
    async with open_engine(settings, workflows=only, observer=quiet) as engine:
        yield Local(manager=engine.manager, runs=engine.runs)


async def resume_task(args: ResumeArgs) -> int:
    """Fork a finished task into a new one that keeps the completed nodes."""
    workflows = load_workflows(settings_from(args.db, args.workflows, args.settings))
    async with open_database(args.db) as local:
        source = await local.manager.get(args.task_id)
    if source.name not in workflows:
        raise CommandError(
            f"task {source.id} ran workflow {source.name!r}, which is not loaded "
            "(load it with --workflows MODULE)"
        )
    try:
        workflow = workflows.version(source.name, source.workflow_version)
    except UnknownWorkflowError:
        loaded = ", ".join(each.version for each in workflows.versions(source.name))
        raise CommandError(
            f"task {source.id} ran {source.name} version {source.workflow_version}, which is "
            f"not loaded here (loaded versions: {loaded}); load it with --workflows "
            "MODULE|FILE.py"
        ) from None
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
        intro = (
            f"Task {forked.task.id} resumes task {source.id}.",
            f"  kept (not run again): {', '.join(forked.kept) or 'none'}",
            f"  runs again:           {', '.join(forked.rerun)}",
        )
        if not args.run:
            print("\n".join(intro))
            flags = again_flags(args)
            print(f"  A worker on this database runs it (taskloom worker{flags});")
            print(f"  follow it with: taskloom tasks watch {forked.task.id}{flags}")
            return EXIT_OK
        return await follow(
            local.manager,
            local.runs,
            workflow,
            forked.task,
            on_interrupt="cancel",
            flags=again_flags(args),
            intro=intro,
        )
