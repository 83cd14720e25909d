"""Serving the dashboard alone (``taskloom ui``): uvicorn with ``/ui`` and nothing else."""

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from taskloom.server.http.endpoint import UI_PATH
from taskloom.server.http.grant_watch import GrantWatch
from taskloom.server.http.service import (
    GRACEFUL_SHUTDOWN_S,
    listen,
    run_uvicorn,
    serving_uvicorn,
)


class _OnlyUi:
    def __init__(self, ui: ASGIApp) -> None:
        self._ui = ui

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == UI_PATH or path.startswith(UI_PATH + "/"):
            await self._ui(scope, receive, send)
        else:
            await RedirectResponse(UI_PATH + "/", status_code=307)(scope, receive, send)


async def serve_ui_alone(
    ui: ASGIApp,
    host: str,
    port: int,
    *,
    watch: GrantWatch | None = None,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *ui* on *host*:*port* until cancelled; *task_status* gets the bound port;
    *watch*, the dashboard's, ends the open streams as the server starts stopping.

    Raises:
        ListenError: the address cannot be bound.
    """
    sock = listen(host, port)
    server = serving_uvicorn(
        watch if watch is not None else GrantWatch(),
        uvicorn.Config(
            _OnlyUi(ui),
            lifespan="off",
            log_level="warning",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        ),
    )
    task_status.started(sock.getsockname()[1])
    await run_uvicorn(server, sock)
