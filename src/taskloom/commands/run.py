"""``taskloom run WORKFLOW --input JSON``: run a workflow in this process, with live progress."""

import argparse
from datetime import timedelta
from typing import Any, Literal

from taskloom.bootstrap import load_workflows, open_engine
from taskloom.commands.common import (
    add_db,
    add_settings,
    add_workflows,
    env,
    find_workflow,
    read_json_object,
    settings_from,
)
from taskloom.commands.durations import retention
from taskloom.commands.follow import follow
from taskloom.engine.manager import DEFAULT, Sentinel
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.submit import submit
from taskloom.observability import standard_observer
from taskloom.persistence.factory import describe_database


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Add ``run`` to the command line."""
    parser = commands.add_parser(
        "run",
        help="run a workflow here, with live progress",
        description="Run a workflow as a durable task in this process and show its progress. "
        "Ctrl-C cancels it. Exit code: 0 completed, 1 failed, 130 cancelled.",
    )
    parser.add_argument("workflow", metavar="WORKFLOW", help="the workflow to run")
    parser.add_argument(
        "--input",
        default=env("INPUT", "{}"),
        metavar="JSON|@FILE",
        help="its arguments: a JSON object, @file or @- for stdin (env TASKLOOM_INPUT)",
    )
    parser.add_argument(
        "--ttl",
        type=retention,
        default=env("TTL") or argparse.SUPPRESS,  # absent: the workflow's default
        metavar="DURATION",
        help="keep the task this long after its creation, e.g. 7d or 12h, or 'forever' "
        "(env TASKLOOM_TTL; default: the workflow's retention, else 30 days; at most 365 days)",
    )
    add_db(parser)
    add_workflows(parser)
    add_settings(parser)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    """Submit the workflow, execute it with an in-process worker, follow it to its end."""
    arguments = read_json_object(args.input, "--input")
    settings = settings_from(args, run_sweeper=False)
    workflow = find_workflow(load_workflows(settings), args.workflow)
    only = WorkflowRegistry({workflow.name: workflow})
    quiet = standard_observer(logs=False)  # the progress view says it all
    async with open_engine(settings, workflows=only, observer=quiet) as engine:
        ttl: int | Literal[Sentinel.DEFAULT] | None = (
            _milliseconds(args.ttl) if hasattr(args, "ttl") else DEFAULT
        )
        task = await submit(engine.manager, workflow, arguments, ttl_ms=ttl)
        print(
            f"Running {workflow.name} as task {task.id} in {describe_database(args.db)} (Ctrl-C cancels it)"
        )
        return await follow(engine.manager, engine.runs, workflow, task, on_interrupt="cancel")


def _milliseconds(ttl: timedelta | None) -> int | None:
    return None if ttl is None else max(1, round(ttl.total_seconds() * 1000))
