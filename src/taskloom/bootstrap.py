"""The composition root: the only module that wires the store, the engine and its loops."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from taskloom.config import TaskloomSettings
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import Clock
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.runs import RunStore
from taskloom.engine.worker import Worker
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.persistence.sqlite.slots import WorkerSlot
from taskloom.server import TaskServer
from taskloom.server.http import HttpService, HttpSettings
from taskloom.validation import JsonSchemaValidator


@dataclass(frozen=True)
class Engine:
    """An open engine: tasks, runs, the workflows it knows, and its worker (if any)."""

    manager: TaskManager
    runs: RunStore
    workflows: WorkflowRegistry
    worker: Worker | None


def load_workflows(settings: TaskloomSettings) -> WorkflowRegistry:
    """The workflows named by *settings* (modules, then entry points), validated and
    configured with ``settings.workflow_settings``.

    Raises:
        WorkflowDefinitionError: a module cannot be loaded, or settings name a workflow
            that is not loaded or do not fit its settings model.
    """
    registry = WorkflowRegistry()
    for module in settings.workflow_modules:
        registry.load_module(module)
    if settings.load_entry_points:
        registry.load_entry_points()
    for name, values in settings.workflow_settings.items():
        if name not in registry:
            raise WorkflowDefinitionError(f"settings are given for {name!r}, which is not loaded")
        registry.configure(name, values)
    return registry


@asynccontextmanager
async def open_engine(
    settings: TaskloomSettings | None = None,
    *,
    clock: Clock | None = None,
    workflows: WorkflowRegistry | None = None,
) -> AsyncIterator[Engine]:
    """Open the database and yield a running engine; stop and close everything on exit.

    The worker takes a slot on the database (see ``WorkerSlot``): if that slot's
    previous holder died, its runs are taken back at once rather than after their
    leases expire.
    """
    settings = settings if settings is not None else TaskloomSettings()
    registry = workflows if workflows is not None else load_workflows(settings)
    async with SqliteTaskStore.open(settings.database) as store:
        manager = TaskManager(
            store, clock=clock, settings=settings.tasks, validator=JsonSchemaValidator()
        )
        with WorkerSlot(settings.database.path) as slot:
            worker = None
            if settings.run_worker:
                worker = Worker(
                    manager,
                    store,
                    dict(registry),
                    settings=settings.worker,
                    worker_id=slot.worker_id,
                    reclaim_from=slot.worker_id,
                )
            async with anyio.create_task_group() as task_group:
                if settings.run_sweeper:
                    task_group.start_soon(manager.run_sweeper)
                if worker is not None:
                    await task_group.start(worker.run)
                try:
                    yield Engine(manager=manager, runs=store, workflows=registry, worker=worker)
                finally:
                    task_group.cancel_scope.cancel()


async def serve_stdio(settings: TaskloomSettings | None = None) -> None:
    """Open the engine and serve MCP over stdin and stdout until stdin closes."""
    settings = settings if settings is not None else TaskloomSettings()
    async with open_engine(settings) as engine:
        server = TaskServer(engine.manager, engine.workflows, settings.server, runs=engine.runs)
        await server.serve_stdio()


async def serve_http(settings: TaskloomSettings | None, http: HttpSettings) -> None:
    """Open the engine and serve MCP over Streamable HTTP until the process is stopped."""
    settings = settings if settings is not None else TaskloomSettings()
    async with open_engine(settings) as engine:
        server = TaskServer(engine.manager, engine.workflows, settings.server, runs=engine.runs)
        await HttpService(server, http).serve()
