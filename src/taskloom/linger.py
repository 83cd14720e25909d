"""Work that goes on after a stdio server's host leaves (ADR 0040).

A stdio server lives as long as its host: a one-shot host, or a closed editor, ends it.
When it ends (its stdin closes, or SIGINT or SIGTERM) while tasks it created or ran are
unfinished, it hands them to a *lingering worker*: a background process on the same
SQLite database (``python -m taskloom.linger``, given the server's settings on its stdin)
that runs them and exits when no queued or running task of its workflows (the names and
versions it loaded: what its worker may claim) is left. One
runs per database at a time, holding ``<db>.linger.lock``; it logs to ``<db>.linger.log``.
The server itself exits as promptly as before: starting the worker costs a fork.

A task waiting for an answer (``input_required``) keeps no worker alive: whoever answers
it (a new server, ``taskloom tasks answer``, ``taskloom worker``) runs it on. On
PostgreSQL nothing is handed off: a shared database is served by ``taskloom worker``
processes, which outlive hosts by design.
"""

import fcntl
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import anyio

from taskloom.config import TaskloomSettings
from taskloom.engine.claims import ClaimRule
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.observe import NullObserver, RunInfo
from taskloom.engine.registry import loaded_versions
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteSettings

logger = logging.getLogger("taskloom.linger")  # also when run as __main__

CHECK_EVERY_S: Final = 0.5
"""How often a lingering worker looks for work left when its own worker changed nothing
(other processes may have taken or ended the work)."""
HANDOFF_CHECK_S: Final = 2.0
"""The longest a stopping server spends finding out whether any of its tasks is unfinished."""
WORK: Final = frozenset({TaskState.QUEUED, TaskState.RUNNING})
"""The states a lingering worker stays for (a task waiting for input is not work)."""


def lock_path(database: Path) -> Path:
    """``<db>.linger.lock``: held by the database's lingering worker."""
    database = database.resolve()
    return database.with_name(database.name + ".linger.lock")


def log_path(database: Path) -> Path:
    """``<db>.linger.log``: what lingering workers on the database did."""
    database = database.resolve()
    return database.with_name(database.name + ".linger.log")


def hands_off(settings: TaskloomSettings) -> bool:
    """Whether a stdio server with *settings* hands its unfinished tasks to a lingering
    worker when its host leaves: on an SQLite database, unless ``server.linger`` is off."""
    return (
        settings.server.linger
        and settings.run_worker
        and isinstance(settings.database, SqliteSettings)
        and not settings.database.read_only
    )


def after_host_note(settings: TaskloomSettings) -> str:
    """What a deferred answer says becomes of the task if the host closes the server."""
    if hands_off(settings):
        assert isinstance(settings.database, SqliteSettings)
        return (
            "If the host closes this server first, a background worker on the same database "
            f"finishes the task (log: {log_path(settings.database.path)})."
        )
    return (
        "If the host closes this server first, the task waits, unfinished, until taskloom "
        "runs again on this database (taskloom serve or taskloom worker)."
    )


class UnfinishedTasks(NullObserver):
    """The tasks this process created (:meth:`task_created`) or began running
    (:meth:`run_started`), as the engine's observer is told; :meth:`any_left` checks
    them in the store. Not the change feed: it also carries other processes' tasks (the
    foreign-change poll, notes on runs waiting for a version), which are not this
    server's to hand off."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def task_created(self, task: Task) -> None:
        """Track it."""
        self._ids.add(task.id)

    def run_started(self, run: RunInfo) -> None:
        """Track it: this process's worker claimed it."""
        self._ids.add(run.task_id)

    def task_finished(self, task: Task) -> None:
        """Forget it."""
        self._ids.discard(task.id)

    async def any_left(self, manager: TaskManager) -> bool:
        """Whether one of them is still queued or running in *manager*'s store (a task
        waiting for input needs no worker until answered); at most ``HANDOFF_CHECK_S``:
        when the store does not answer in time, ``True``."""
        with anyio.move_on_after(HANDOFF_CHECK_S):
            for task_id in list(self._ids):
                try:
                    task = await manager.get(task_id)
                except TaskNotFoundError:  # deleted, or expired
                    continue
                if task.state in WORK:
                    return True
            return False
        return True


def start_lingering_worker(settings: TaskloomSettings) -> Path | None:
    """Start a lingering worker for the database of *settings* in the background (in a
    session of its own, so the host's signals do not reach it); the path of its log, or
    ``None`` when it could not be started (logged: the tasks wait for the next process)."""
    assert isinstance(settings.database, SqliteSettings)
    log = log_path(settings.database.path)
    try:
        with log.open("ab") as output:
            child = subprocess.Popen(
                [sys.executable, "-m", "taskloom.linger"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=output,
                start_new_session=True,
                close_fds=True,
            )
        assert child.stdin is not None
        with child.stdin:
            child.stdin.write(settings.model_dump_json().encode("utf-8"))
    except OSError as error:
        logger.warning("could not start a lingering worker (%s); the tasks wait", error)
        return None
    logger.info("unfinished tasks handed to a lingering worker (pid %d, log %s)", child.pid, log)
    return log


@contextmanager
def linger_lock(database: Path) -> Iterator[bool]:
    """Hold the database's linger lock if it is free: yields whether it was taken."""
    fd = os.open(lock_path(database), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


async def work_left(manager: TaskManager, workflows: Mapping[str, Workflow[Any]]) -> bool:
    """Whether a task that one of *workflows* runs (its name, and a version loaded here,
    or none recorded) is queued or running: only what this process's worker may claim
    keeps it lingering; a run of a version it lacks waits for a process that has it."""
    rule = ClaimRule.of(loaded_versions(workflows))
    names = sorted(rule.workflows)
    if not names:
        return False
    cursor = None
    while True:
        page = await manager.list(
            states=WORK, names=names, limit=manager.settings.max_page_size, cursor=cursor
        )
        if any(rule.has_version(task.name, task.workflow_version) for task in page.tasks):
            return True
        cursor = page.next_cursor
        if cursor is None:
            return False


async def linger(settings: TaskloomSettings) -> None:
    """Run the database's unfinished work until none is left, or until SIGINT or SIGTERM
    (its runs in flight are then handed back, as any worker's)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                async for received in signals:
                    logger.info("%s: stopping", signal.Signals(received).name)
                    group.cancel_scope.cancel()
                    return

            group.start_soon(stop_on_signal)
            await _until_no_work_left(settings)
            group.cancel_scope.cancel()


async def _until_no_work_left(settings: TaskloomSettings) -> None:
    """Work while the lock is ours and work is left. On leaving, the lock is let go
    before a last look: work that arrived meanwhile is taken on again, unless another
    lingering worker took the lock since (one that fails to take it has already handed
    its work over, so the holder's last look sees that work)."""
    from taskloom.bootstrap import open_engine
    from taskloom.observability.change_lines import log_changes

    assert isinstance(settings.database, SqliteSettings)
    database = settings.database.path
    looking = settings.model_copy(update={"run_worker": False, "run_sweeper": False})
    while True:
        with linger_lock(database) as taken:
            if not taken:
                logger.info("another lingering worker runs on %s; it takes the work", database)
                return
            async with open_engine(settings) as engine, anyio.create_task_group() as group:
                workflows = engine.workflows
                if engine.worker is not None:
                    await group.start(log_changes, engine.manager, engine.worker)
                worker = engine.worker.worker_id if engine.worker is not None else "-"
                logger.info("lingering worker %s on %s runs what is left", worker, database)
                with engine.manager.subscribe() as changes:
                    while await work_left(engine.manager, workflows):
                        if not database.exists():  # deleted under it: nothing to finish
                            break
                        with anyio.move_on_after(CHECK_EVERY_S):  # others' changes too
                            await changes.receive()
                group.cancel_scope.cancel()
        if not database.exists():
            logger.info("%s was deleted; the lingering worker exits", database)
            return
        async with open_engine(looking) as engine:
            if not await work_left(engine.manager, workflows):
                logger.info("no work left on %s; the lingering worker exits", database)
                return


def main() -> None:
    """``python -m taskloom.linger``: the settings as JSON on stdin; logs on stderr."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    given = TaskloomSettings.model_validate_json(sys.stdin.buffer.read())
    settings = given.model_copy(update={"freeze_start_up": True})  # its own process (ADR 0061)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    try:
        anyio.run(linger, settings, backend="asyncio")
    except Exception:
        logger.exception("the lingering worker failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
