"""``taskloom run WORKFLOW [INPUT]``: run a workflow in this process, with live progress."""

from datetime import timedelta
from typing import Literal

from taskloom.bootstrap import load_workflows, open_engine
from taskloom.commands.arguments import RunArgs
from taskloom.commands.base import CommandError
from taskloom.commands.common import (
    again_flags,
    find_workflow,
    read_json_object,
    settings_from,
)
from taskloom.commands.follow import follow
from taskloom.commands.workflows import starts_children
from taskloom.engine.manager import DEFAULT, Sentinel
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.submit import submit
from taskloom.observability import standard_observer
from taskloom.persistence.factory import describe_database


async def run(args: RunArgs) -> int:
    """Submit the workflow, execute it with an in-process worker, follow it to its end."""
    if args.input_text is not None and args.input_flag is not None:
        raise CommandError("give the arguments once: as INPUT or with --input, not both")
    text = args.input_text if args.input_text is not None else args.input_flag
    arguments = read_json_object(text if text is not None else "{}", "--input")
    settings = settings_from(  # the process is taskloom's until the run ends (ADR 0061)
        args.db, args.workflows, args.settings, run_sweeper=False, freeze_start_up=True
    )
    loaded = load_workflows(settings)
    workflow = find_workflow(loaded, args.workflow)
    only = WorkflowRegistry({workflow.name: workflow})
    if any(starts_children(node) for node in workflow.nodes.values()):
        only = loaded  # its children run here too
    quiet = standard_observer(logs=False)  # the progress view says it all
    async with open_engine(settings, workflows=only, observer=quiet) as engine:
        ttl: int | Literal[Sentinel.DEFAULT] | None = (
            DEFAULT if args.ttl is None else _milliseconds(args.ttl)
        )
        task = await submit(engine.manager, workflow, arguments, ttl_ms=ttl)
        return await follow(
            engine.manager,
            engine.runs,
            workflow,
            task,
            on_interrupt="cancel",
            flags=again_flags(args),
            intro=(
                f"Running {workflow.name} as task {task.id} in {describe_database(args.db)}",
                "  Ctrl-C cancels it.",
            ),
        )


def _milliseconds(ttl: timedelta | Literal["forever"]) -> int | None:
    return None if ttl == "forever" else max(1, round(ttl.total_seconds() * 1000))
