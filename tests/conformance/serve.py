"""A conformance server: taskloom over Streamable HTTP on 127.0.0.1 with the suite's
fixture tools, for ``make conformance``. Test-only.

``python -m tests.conformance.serve PORT DATABASE``

The suite speaks 2026-07-28 over Streamable HTTP without credentials, so every request
acts for the anonymous owner; one SDK ``Server`` serves them all. Only ``greet`` is the
harness's own (a sync plain-text tool, which a workflow cannot be); everything else —
task creation, ``tasks/*``, codes and shapes — is taskloom's ``TaskServer``.
"""

import math
import sys
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.message import SessionMessage

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings, TaskServer
from taskloom.server.push import Outbox, TaskFollowers
from tests.conformance.fixtures import FIXTURES


async def greet(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Server middleware: the suite's sync-only ``greet(name)``."""
    params = ctx.params or {}
    if ctx.method != "tools/call" or params.get("name") != "greet":
        return await call_next(ctx)
    name = (params.get("arguments") or {}).get("name", "World")
    return {"content": [{"type": "text", "text": f"Hello, {name}!"}], "resultType": "complete"}


async def serve(port: int, database: Path) -> None:
    settings = TaskloomSettings(
        database=SqliteSettings(path=database),
        worker=WorkerSettings(poll_s=0.05, progress_interval_s=0.2, input_recheck_s=None),
        workflow_modules=(),
        load_entry_points=False,
    )
    registry = WorkflowRegistry({workflow.name: workflow for workflow in FIXTURES})
    async with (
        open_engine(settings, workflows=registry) as engine,
        anyio.create_task_group() as task_group,
    ):
        task_server = TaskServer(engine.manager, engine.workflows, ServerSettings(recheck_s=None))
        # 2025-11-25 followers push on a connection's own stream; the suite never opens a
        # 2025-11-25 connection, so they get a stream nobody reads.
        nowhere, _ = anyio.create_memory_object_stream[SessionMessage](math.inf)
        followers = TaskFollowers(engine.manager, Outbox(nowhere), task_group)
        server = task_server._connection_server(followers, owner=None)  # until HTTP is served
        server.middleware.insert(0, greet)
        app = server.streamable_http_app(host="127.0.0.1")
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        await uvicorn.Server(config).serve()
        task_group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(serve, int(sys.argv[1]), Path(sys.argv[2]))
