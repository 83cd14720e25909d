"""The composition root: the only module that wires the store, the engine and its loops."""

import gc
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
from anyio.abc import TaskStatus

from taskloom.config import TaskloomSettings
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import (
    InvalidRequestError,
    WorkflowDefinitionError,
)
from taskloom.engine.foreign import follow_foreign_changes
from taskloom.engine.manager import TaskManager
from taskloom.engine.observe import Observer, Observers
from taskloom.engine.ports import Clock
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.runs import RunStore
from taskloom.engine.tokens import TokenStore, TokenVerifier
from taskloom.engine.worker import Worker, default_worker_id
from taskloom.observability import standard_observer
from taskloom.persistence.factory import DatabaseSettings, open_store
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.persistence.sqlite.slots import WorkerSlot
from taskloom.validation import JsonSchemaValidator

if TYPE_CHECKING:
    from taskloom.persistence.postgres.store import PostgresTaskStore
    from taskloom.persistence.sqlite.store import SqliteTaskStore
    from taskloom.server.app import TaskServer
    from taskloom.server.embedded import DurableTasks
    from taskloom.server.http.settings import HttpSettings
    from taskloom.server.http.tokens import StoredTokens


@dataclass(frozen=True)
class Engine:
    """An open engine: tasks, runs, the workflows it knows, and its worker (if any)."""

    manager: TaskManager
    runs: RunStore
    workflows: WorkflowRegistry
    worker: Worker | None
    tokens: TokenStore | None = None
    """The access tokens of ``taskloom tokens`` (ADR 0028)."""


def load_workflows(settings: TaskloomSettings) -> WorkflowRegistry:
    """The workflows named by *settings* (modules, then entry points), validated and
    configured with ``settings.workflow_settings`` for ``settings.exposure``: every
    workflow that takes settings is configured, given values or not, since its defaults
    may depend on who can call it.

    Raises:
        WorkflowDefinitionError: a module cannot be loaded, or settings name a workflow
            that is not loaded or do not fit its settings model.
    """
    registry = WorkflowRegistry()
    for module in settings.workflow_modules:
        registry.load_module(module)
    if settings.load_entry_points:
        registry.load_entry_points()
    configure_workflows(registry, settings)
    return registry


def configure_workflows(registry: WorkflowRegistry, settings: TaskloomSettings) -> None:
    """Configure every workflow of *registry* that takes settings with
    ``settings.workflow_settings`` for ``settings.exposure`` (given values or not).

    Raises:
        WorkflowDefinitionError: settings name a workflow that is not in *registry*, or
            do not fit its settings model (the message names the workflow and field).
    """
    for name in settings.workflow_settings:
        if name not in registry:
            raise WorkflowDefinitionError(f"settings are given for {name!r}, which is not loaded")
    for name, workflow in list(registry.items()):
        if workflow.settings_model is not None:
            values = settings.workflow_settings.get(name, {})
            registry.configure(name, values, exposure=settings.exposure)


@asynccontextmanager
async def open_engine(
    settings: TaskloomSettings | None = None,
    *,
    clock: Clock | None = None,
    workflows: WorkflowRegistry | None = None,
    observer: Observer | None = None,
) -> AsyncIterator[Engine]:
    """Open the database and yield a running engine; stop and close everything on exit.

    The store is the SQLite file or the PostgreSQL database of ``settings.database``.
    On SQLite the worker takes a slot on the file (see ``WorkerSlot``): if that slot's
    previous holder died, its runs are taken back at once rather than after their
    leases expire. On PostgreSQL, where workers run on many machines, a dead worker's
    runs are taken back by any live worker once their leases expire, and changes made by
    other processes are published here as PostgreSQL announces them: workers wake on
    new work, and a cancel made anywhere reaches the node running it.

    Lifecycle events go to *observer*: by default, log records and OpenTelemetry spans.
    """
    settings = settings if settings is not None else TaskloomSettings()
    registry = workflows if workflows is not None else load_workflows(settings)
    async with open_store(settings.database) as store:
        manager = TaskManager(
            store,
            runs=store,
            clock=clock,
            settings=settings.tasks,
            validator=JsonSchemaValidator(),
            observer=observer if observer is not None else standard_observer(),
        )
        with _worker_identity(settings.database) as (worker_id, reclaim_from):
            worker = None
            if settings.run_worker:
                worker = Worker(
                    manager,
                    registry,
                    settings=settings.worker,
                    worker_id=worker_id,
                    reclaim_from=reclaim_from,
                )
            async with anyio.create_task_group() as task_group:
                await _follow_other_processes(
                    task_group, settings.database, store, manager, work_only=settings.worker_only
                )
                if settings.run_sweeper:
                    task_group.start_soon(manager.run_sweeper)
                if worker is not None:
                    await task_group.start(worker.run)
                    store.on_back(worker.wake)  # work waiting for the database goes on now
                if settings.freeze_start_up:
                    _freeze_start_up()
                try:
                    yield Engine(
                        manager=manager, runs=store, workflows=registry, worker=worker, tokens=store
                    )
                finally:
                    task_group.cancel_scope.cancel()


_frozen = False
YOUNG_COLLECTION_EVERY: Final = 10_000
"""In the processes taskloom owns, the young generation is collected once this many more
container objects were made than freed (Python's default: 700). Each request and each
run make and free thousands; with many in flight, most are alive at a collection made
every 700, which walks them all: 5 to 6% of a stdio server's CPU with 16 creates in
flight, 1.3 to 2.1% at this value (ADR 0070)."""


def _freeze_start_up() -> None:
    """Once a process, when its first engine has started: what the process holds then
    (modules, classes, schemas, workflows, the engine; some 100,000 objects) goes out of
    the garbage collector's reach (``gc.freeze``, a microsecond), so that each later full
    collection walks only what came since: some 30 ms less each, on a worker (ADR 0061).
    A frozen object is still freed when its last reference goes, but frozen garbage (a
    cycle not yet collected; a collection first would cost 30 ms for some 250 objects)
    is never collected, nor what it references: for the processes taskloom owns. The
    young generation is then collected every ``YOUNG_COLLECTION_EVERY`` allocations
    (unless collection is off, or a higher threshold was set: neither is lowered)."""
    global _frozen  # once a process, whatever engines it opens
    if _frozen:
        return
    _frozen = True
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    if 0 < young < YOUNG_COLLECTION_EVERY:
        gc.set_threshold(YOUNG_COLLECTION_EVERY, older, oldest)


def _unfrozen() -> None:
    """A forked child's start-up is its own: it freezes it with its first engine."""
    global _frozen
    _frozen = False


os.register_at_fork(after_in_child=_unfrozen)


async def _follow_other_processes(
    task_group: anyio.abc.TaskGroup,
    database: DatabaseSettings,
    store: Any,
    manager: TaskManager,
    *,
    work_only: bool = False,
) -> None:
    """Publish on *manager*'s feed what other processes change: as PostgreSQL announces
    it (with *work_only*, only what a worker acts on: ADR 0062), or, on SQLite, as a poll
    of the running tasks finds it (ADR 0042)."""
    if isinstance(database, PostgresSettings):
        postgres = cast("PostgresTaskStore", store)  # what open_store opens for it
        watch = partial(postgres.watch_changes, manager.notice, work_only=work_only)
        await task_group.start(watch)
    elif isinstance(database, SqliteSettings):
        sqlite = cast("SqliteTaskStore", store)
        await task_group.start(follow_foreign_changes, manager, sqlite.running_versions)


@contextmanager
def _worker_identity(database: DatabaseSettings) -> Iterator[tuple[str, str | None]]:
    """This process's worker id, and the dead predecessor whose runs it may take back now."""
    if isinstance(database, SqliteSettings):
        with WorkerSlot(database.path) as slot:
            yield slot.worker_id, slot.worker_id
    else:
        yield default_worker_id(), None


async def serve_stdio(settings: TaskloomSettings | None = None) -> None:
    """Open the engine and serve MCP over stdin and stdout until stdin closes (or a
    cancel). Tasks it created or ran that are unfinished then go to a lingering worker
    (``taskloom.linger``), when ``settings.server.linger`` holds on SQLite."""
    from taskloom.linger import UnfinishedTasks, after_host_note, hands_off, start_lingering_worker
    from taskloom.server.app import TaskServer  # the SDK loads only to serve

    settings = settings if settings is not None else TaskloomSettings()
    left = False
    try:
        unfinished = UnfinishedTasks()  # told of this process's creates and runs
        observer = Observers([standard_observer(), unfinished])
        async with open_engine(settings, observer=observer) as engine:
            note = after_host_note(settings)
            server = TaskServer(
                engine.manager, engine.workflows, settings.server, runs=engine.runs, after_host=note
            )
            try:
                await server.serve_stdio()
            finally:
                with anyio.CancelScope(shield=True):
                    left = hands_off(settings) and await unfinished.any_left(engine.manager)
    finally:  # the engine has handed its runs back: the worker takes them at once
        if left:
            start_lingering_worker(settings)  # OSError: logged, the tasks wait


async def serve_http(
    settings: TaskloomSettings | None,
    http: "HttpSettings",
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Open the engine and serve MCP over Streamable HTTP, and its metrics at ``/metrics``,
    until the process is stopped; *task_status* gets the bound port once listening. The
    workflows are configured for ``network`` callers, whatever ``settings.exposure`` says."""
    from taskloom.observability.metrics import Metrics  # prometheus_client: only to serve
    from taskloom.observability.version_watch import watch_versions
    from taskloom.server.app import TaskServer  # the SDK loads only to serve
    from taskloom.server.dashboard.hub import ChangeHub
    from taskloom.server.dashboard.mount import ui_app
    from taskloom.server.http.authentication import Authenticator
    from taskloom.server.http.endpoint import principal_limiter
    from taskloom.server.http.service import HttpService

    settings = settings if settings is not None else TaskloomSettings()
    settings = settings.model_copy(update={"exposure": "network"})
    _refuse_unprotected_new_database(settings.database, http)
    metrics = Metrics()
    hub = ChangeHub()
    observer = Observers([standard_observer(metrics), hub])
    async with open_engine(settings, observer=observer) as engine:
        server = TaskServer(engine.manager, engine.workflows, settings.server, runs=engine.runs)
        stored = await _stored_tokens(engine, http)
        limiter = principal_limiter(http)  # one allowance per principal, /mcp and /ui
        authenticator = Authenticator(http, stored)  # one watch of grants, /mcp and /ui
        ui = ui_app(
            engine.manager,
            engine.runs,
            engine.workflows,
            hub,
            authenticator=authenticator,
            recheck_s=None if settings.run_worker else settings.server.recheck_s,
            http=http,
            limiter=limiter,
            max_unfinished=settings.server.max_unfinished_per_principal,
        )
        service = HttpService(
            server,
            http,
            metrics=metrics.render,
            stored_tokens=stored,
            ui=ui,
            limiter=limiter,
            authenticator=authenticator,
            store_wait_s=settings.database.store_wait_s,
        )
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(hub.follow, engine.manager)
            loaded = engine.workflows.loaded() if engine.worker is not None else {}
            task_group.start_soon(
                watch_versions, metrics, engine.runs, engine.manager.clock, loaded
            )
            await service.serve(task_status=task_status)
            task_group.cancel_scope.cancel()


UI_RECHECK_S = 1.0
"""How often ``taskloom ui`` re-reads what a live page shows: the processes that change
the database are others, whose events do not reach it (on SQLite)."""


async def serve_ui(
    settings: TaskloomSettings,
    http: "HttpSettings",
    *,
    allow_actions: bool,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the dashboard alone for the database of *settings* (no worker, no MCP):
    read-only unless *allow_actions*. Without tokens (static or stored), it serves
    loopback only and its viewer is the operator, who sees every task.

    Raises:
        InvalidRequestError: a non-loopback address, and no token at all.
    """
    from taskloom.server.dashboard.hub import ChangeHub
    from taskloom.server.dashboard.mount import ui_app
    from taskloom.server.dashboard.standalone import serve_ui_alone
    from taskloom.server.http.authentication import Authenticator
    from taskloom.server.http.endpoint import principal_limiter

    database = settings.database
    _refuse_unprotected_new_database(database, http, tokens_file=False)
    if isinstance(database, SqliteSettings) and not allow_actions:
        database = database.model_copy(update={"read_only": True})
    registry = load_workflows(settings)
    hub = ChangeHub()
    async with open_store(database) as store:  # no worker, no slot: it runs nothing
        manager = TaskManager(
            store, settings=settings.tasks, validator=JsonSchemaValidator(), observer=hub
        )
        engine = Engine(manager=manager, runs=store, workflows=registry, worker=None, tokens=store)
        stored = await _stored_tokens(engine, http, tokens_file=False)
        authenticator = Authenticator(http, stored)
        ui = ui_app(
            manager,
            store,
            registry,
            hub,
            authenticator=authenticator,
            allow_actions=allow_actions,
            operator=not authenticator,
            recheck_s=UI_RECHECK_S,
            http=http,
            limiter=principal_limiter(http),
            max_unfinished=settings.server.max_unfinished_per_principal,
        )
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(hub.follow, manager)
            task_group.start_soon(authenticator.watch.run)
            await _follow_other_processes(task_group, database, store, manager)
            await serve_ui_alone(
                ui, http.host, http.port, watch=authenticator.watch, task_status=task_status
            )
            task_group.cancel_scope.cancel()


async def _stored_tokens(
    engine: Engine, http: "HttpSettings", *, tokens_file: bool = True
) -> "StoredTokens | None":
    """The check of the database's tokens, if they are on and some token is active.

    Raises:
        InvalidRequestError: a non-loopback address, and no token at all.
    """
    from taskloom.server.http.settings import is_loopback  # stdio loads no HTTP (ADR 0071)

    if not http.stored_tokens or engine.tokens is None:
        return None
    verifier = TokenVerifier(engine.tokens, engine.manager.clock)
    if await verifier.any_active():
        return verifier
    if not http.authenticates and not is_loopback(http.host):
        raise _unprotected(http, tokens_file=tokens_file)
    return None


def _refuse_unprotected_new_database(
    database: DatabaseSettings, http: "HttpSettings", *, tokens_file: bool = True
) -> None:
    """Refuse before opening, so before creating, a SQLite file that does not exist yet
    where a non-loopback server without static tokens would need a stored one: a new
    database holds none (the check after opening, :func:`_stored_tokens`, covers the rest).

    Raises:
        InvalidRequestError: as :func:`_stored_tokens` would, once the file was made.
    """
    from taskloom.server.http.settings import is_loopback  # stdio loads no HTTP (ADR 0071)

    if (
        isinstance(database, SqliteSettings)
        and not database.path.exists()
        and not http.authenticates
        and not is_loopback(http.host)
    ):
        raise _unprotected(http, tokens_file=tokens_file)


def _unprotected(http: "HttpSettings", *, tokens_file: bool) -> InvalidRequestError:
    """The refusal; *tokens_file*: the command takes ``--tokens-file`` (``ui`` does not)."""
    static = "TASKLOOM_TOKENS or --tokens-file" if tokens_file else "TASKLOOM_TOKENS"
    return InvalidRequestError(
        f"refusing to serve HTTP on {http.host} without tokens: create one "
        f"(taskloom tokens create --principal NAME), configure {static}, "
        "or bind a loopback address such as 127.0.0.1"
    )


def durable_tasks(
    workflows: Iterable[Workflow[Any]],
    settings: TaskloomSettings | None = None,
    *,
    clock: Clock | None = None,
) -> "DurableTasks":
    """The ``MCPServer`` extension that serves *workflows* as durable tools on the engine
    *settings* describe (database, worker, server settings); pass its ``lifespan`` to the
    server, which opens the engine when it starts and closes it when it stops::

        tasks = durable_tasks([slow_report])
        mcp = MCPServer("mine", extensions=[tasks], lifespan=tasks.lifespan)

    The workflows that take settings are configured as ``taskloom serve --settings``
    configures them: with ``settings.workflow_settings``, for ``settings.exposure``
    (``network`` when the server is reachable by others). Settings that a workflow
    refuses stop the lifespan at start (``WorkflowDefinitionError`` naming them).
    """
    from taskloom.server.app import TaskServer  # the SDK loads only to serve
    from taskloom.server.embedded import DurableTasks

    settings = settings if settings is not None else TaskloomSettings()
    given = list(workflows)

    def registry() -> WorkflowRegistry:
        found = WorkflowRegistry()
        for workflow in given:
            found.register(workflow)
        return found

    @asynccontextmanager
    async def serve_engine() -> AsyncIterator["TaskServer"]:
        configured = registry()
        configure_workflows(configured, settings)
        async with open_engine(settings, clock=clock, workflows=configured) as engine:
            yield TaskServer(engine.manager, engine.workflows, settings.server, runs=engine.runs)

    return DurableTasks(registry(), settings.server, serve_engine)
