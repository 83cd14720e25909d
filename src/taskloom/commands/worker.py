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

from taskloom.bootstrap import open_engine
from taskloom.commands.base import EXIT_OK, CommandError
from taskloom.commands.common import settings_from
from taskloom.commands.options import setup_logging
from taskloom.commands.serve_settings import given_fields
from taskloom.commands.setting import Values
from taskloom.commands.setting_table import (
    DB,
    LOG_FORMAT,
    LOG_LEVEL,
    MAX_RUNS,
    METRICS,
    OPERATOR_SETTINGS,
    STORE_WAIT_S,
    WORKFLOWS,
)
from taskloom.config import TaskloomSettings
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.observability import standard_observer
from taskloom.observability.change_lines import log_changes
from taskloom.observability.metrics_server import metrics_endpoint
from taskloom.observability.version_watch import watch_versions
from taskloom.persistence.factory import describe_database

logger = logging.getLogger(__name__)


async def run_worker(values: Values) -> int:
    """Execute runs until SIGINT or SIGTERM."""
    settings = worker_settings(values)
    setup_logging(values.given(LOG_FORMAT), values.given(LOG_LEVEL))
    text = values.given(LOG_FORMAT) == "text"
    with (
        anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
        metrics_endpoint(values.of(METRICS)) as served,
    ):
        observer = standard_observer(served.metrics if served else None)
        async with (
            open_engine(settings, observer=observer) as engine,
            anyio.create_task_group() as task_group,
        ):
            assert engine.worker is not None
            if text:
                await task_group.start(log_changes, engine.manager, engine.worker)
            if served:
                task_group.start_soon(
                    watch_versions,
                    served.metrics,
                    engine.runs,
                    engine.manager.clock,
                    engine.workflows.loaded(),
                )
            database = describe_database(values.given(DB))
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


def worker_settings(values: Values) -> TaskloomSettings:
    """The settings the flags ask for."""
    max_runs = values.of(MAX_RUNS)
    if max_runs is not None and max_runs < 1:
        raise CommandError(f"--max-runs must be at least 1, got {max_runs}")
    return settings_from(
        values.given(DB),
        values.of(WORKFLOWS) or (),
        values.of(OPERATOR_SETTINGS),
        store_wait_s=values.of(STORE_WAIT_S),
        worker=WorkerSettings(**given_fields("WorkerSettings", values)),
        freeze_start_up=True,  # the process is taskloom's (ADR 0061)
        worker_only=True,  # it hears only what its worker acts on (ADR 0062)
    )


def _say(text: bool, message: str, **fields: object) -> None:
    """*message* on stderr, or as an INFO log record with *fields* (JSON logs)."""
    if text:
        print(message, file=sys.stderr, flush=True)
    else:
        logger.info(message, extra={"fields": fields})


def _with_versions(workflows: WorkflowRegistry) -> list[str]:
    """Each workflow's name, with its versions when it has loaded several."""
    shown = []
    for name in workflows:
        versions = [workflow.version for workflow in workflows.versions(name)]
        shown.append(name if len(versions) < 2 else f"{name} (versions {', '.join(versions)})")
    return shown
