"""``taskloom worker``: a process that only runs workflows' nodes from the database.

Start as many as you like on one database (and next to ``taskloom serve``): claims are
atomic and every write is fenced by the run's lease. Ctrl-C or SIGTERM stops it; the runs
it holds are handed back and resume from their checkpoints elsewhere. With
``--log-format json`` its stderr is JSON lines only: the banner and the stop are log
records, and task changes are the engine's lifecycle records (``--log-level info``).
"""

import logging
import signal
import sys

import anyio
from anyio.abc import TaskStatus

from taskloom.bootstrap import open_engine
from taskloom.commands.base import EXIT_OK, Args, CommandError
from taskloom.commands.common import settings_from
from taskloom.commands.options import setup_logging
from taskloom.commands.render import when
from taskloom.engine.manager import TaskManager
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.worker import WorkerSettings
from taskloom.observability import standard_observer
from taskloom.observability.metrics_server import metrics_endpoint
from taskloom.observability.version_watch import watch_versions
from taskloom.persistence.factory import describe_database

logger = logging.getLogger(__name__)


async def run_worker(args: Args) -> int:
    """Execute runs until SIGINT or SIGTERM."""
    if args.max_runs is None:
        args.max_runs = WorkerSettings().max_runs
    if args.max_runs < 1:
        raise CommandError(f"--max-runs must be at least 1, got {args.max_runs}")
    setup_logging(args.log_format, args.log_level)
    settings = settings_from(args, worker=WorkerSettings(max_runs=args.max_runs))
    text = args.log_format == "text"
    with (
        anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        metrics_endpoint(args.metrics) as served,
    ):
        observer = standard_observer(served.metrics if served else None)
        async with (
            open_engine(settings, observer=observer) as engine,
            anyio.create_task_group() as task_group,
        ):
            assert engine.worker is not None
            if text:
                await task_group.start(log_changes, engine.manager)
            if served:
                task_group.start_soon(
                    watch_versions,
                    served.metrics,
                    engine.runs,
                    engine.manager.clock,
                    engine.workflows.loaded(),
                )
            database = describe_database(args.db)
            _say(
                text,
                f"worker {engine.worker.worker_id} on {database} runs: "
                f"{', '.join(_with_versions(engine.workflows))}"
                f"{f'; metrics at {served.url}' if served else ''} (Ctrl-C stops it)",
                metrics=served.url if served else None,
                worker_id=engine.worker.worker_id,
                database=database,
                workflows=list(engine.workflows),
                versions=[f"{name}@{version}" for name, version in engine.workflows.loaded()],
            )
            async for received in signals:
                name = signal.Signals(received).name
                _say(text, f"{name}: stopping; runs in flight resume elsewhere", signal=name)
                break
            task_group.cancel_scope.cancel()
    return EXIT_OK


def _say(text: bool, message: str, **fields: object) -> None:
    """*message* on stderr, or as an INFO log record with *fields* (JSON logs)."""
    if text:
        print(message, file=sys.stderr, flush=True)
    else:
        logger.info(message, extra={"fields": fields})


async def log_changes(
    manager: TaskManager, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """One line on stderr each time a task this process runs changes state."""
    states: dict[str, TaskState] = {}
    with manager.subscribe() as changes:
        task_status.started()
        async for task in changes:
            if states.get(task.id) is task.state:
                continue
            states[task.id] = task.state
            why = ""
            if task.is_terminal:
                del states[task.id]
                if task.state is not TaskState.COMPLETED:
                    why = f": {task.error.message if task.error else task.status_message}"
            print(
                f"{when(task.updated_at)}  {task.name} {task.id} {task.state}{why}", file=sys.stderr
            )


def _with_versions(workflows: WorkflowRegistry) -> list[str]:
    """Each workflow's name, with its versions when it has loaded several."""
    shown = []
    for name in workflows:
        versions = [workflow.version for workflow in workflows.versions(name)]
        shown.append(name if len(versions) < 2 else f"{name} (versions {', '.join(versions)})")
    return shown
