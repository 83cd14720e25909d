"""An engine on SQLite in tmp_path, a TaskServer over it, and in-process legacy clients."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ElicitationFnT
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import TaskManagerSettings
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings, TaskServer
from taskloom.testing import FakeClock
from taskloom.workflows.countdown import countdown
from tests.server import flows
from tests.server.client import LegacyClient, open_client
from tests.server.modern_client import ModernClient, open_modern_client

Connect = Callable[..., AbstractAsyncContextManager[LegacyClient]]
ConnectModern = Callable[..., AbstractAsyncContextManager[ModernClient]]


@pytest.fixture(autouse=True)
def _fresh_gates() -> None:
    flows.GATES.clear()


@pytest.fixture
async def engine(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Engine]:
    """A running engine (with a worker) over a fresh SQLite file, on the fake clock."""
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "tasks.db", synchronous="NORMAL"),
        tasks=TaskManagerSettings(default_page_size=3, max_ttl_ms=600_000),
        worker=WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
    )
    served = (countdown, flows.gated, flows.must_task, flows.ask, flows.fails, flows.broken)
    extra = (flows.ask_two, flows.asks_first, flows.hello_now, flows.pause, flows.pause_again)
    registry = WorkflowRegistry({w.name: w for w in (*served, *extra)})
    async with open_engine(settings, clock=clock, workflows=registry) as opened:
        yield opened


@pytest.fixture
def task_server(engine: Engine) -> TaskServer:
    return TaskServer(
        engine.manager, engine.workflows, ServerSettings(recheck_s=None), runs=engine.runs
    )


@pytest.fixture
def connect(task_server: TaskServer) -> Connect:
    """``async with connect() as client``: a client on a new in-process connection."""

    @asynccontextmanager
    async def connected(
        *,
        protocol_version: str | None = None,
        owner: str | None = None,
        elicitation_callback: ElicitationFnT | None = None,
        declare_tasks: bool = False,
    ) -> AsyncIterator[LegacyClient]:
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as task_group,
        ):
            task_group.start_soon(lambda: task_server.serve(*server_streams, owner=owner))
            async with open_client(
                *client_streams,
                protocol_version,
                elicitation_callback=elicitation_callback,
                declare_tasks=declare_tasks,
            ) as client:
                yield client
            task_group.cancel_scope.cancel()

    return connected


@pytest.fixture
async def client(connect: Connect) -> AsyncIterator[LegacyClient]:
    """A client on a 2025-11-25 connection."""
    async with connect() as connected:
        yield connected


@pytest.fixture
def connect_modern(task_server: TaskServer) -> ConnectModern:
    """``async with connect_modern() as client``: a 2026-07-28 client on a new connection."""

    @asynccontextmanager
    async def connected(
        *, owner: str | None = None, declare: bool = True
    ) -> AsyncIterator[ModernClient]:
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as task_group,
        ):
            task_group.start_soon(lambda: task_server.serve(*server_streams, owner=owner))
            async with open_modern_client(*client_streams, declare=declare) as client:
                yield client
            task_group.cancel_scope.cancel()

    return connected


@pytest.fixture
async def modern(connect_modern: ConnectModern) -> AsyncIterator[ModernClient]:
    """A 2026-07-28 client whose requests declare the tasks extension."""
    async with connect_modern() as connected:
        yield connected
