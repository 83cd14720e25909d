"""Running the endpoint under uvicorn, and stopping it."""

import logging
import socket
from collections.abc import Callable

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.types import ASGIApp

from taskloom.engine.errors import TaskloomError
from taskloom.server.app import TaskServer
from taskloom.server.http.endpoint import HttpEndpoint
from taskloom.server.http.header_timeout import with_header_timeout
from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.sessions import HttpSessions
from taskloom.server.http.settings import HttpSettings
from taskloom.server.http.tokens import StoredTokens

logger = logging.getLogger(__name__)
GRACEFUL_SHUTDOWN_S = 5


class ListenError(TaskloomError):
    """The endpoint cannot listen on its address (in use, not this machine's...)."""


class HttpService:
    """A TaskServer served over Streamable HTTP by uvicorn."""

    def __init__(
        self,
        task_server: TaskServer,
        settings: HttpSettings,
        *,
        metrics: Callable[[], str] | None = None,
        stored_tokens: StoredTokens | None = None,
        ui: ASGIApp | None = None,
        limiter: RateLimiter | None = None,
        store_wait_s: float = 5.0,
    ) -> None:
        """*store_wait_s* is the store's wait (see ``HttpSessions``); *metrics*, if given, renders the Prometheus text served at ``/metrics``;
        *stored_tokens*, if given, checks the database's tokens (every caller then needs
        a token); *ui*, if given, is the dashboard served under ``/ui``; *limiter*, the
        per-principal rate limiter the dashboard shares (else made from *settings*)."""
        self._stored = stored_tokens
        self.settings = settings
        self.sessions = HttpSessions(task_server, settings, store_wait_s=store_wait_s)
        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                HttpEndpoint(
                    self.sessions,
                    settings,
                    metrics=metrics,
                    stored_tokens=stored_tokens,
                    ui=ui,
                    limiter=limiter,
                ),
                host=settings.host,
                port=settings.port,
                http=with_header_timeout(settings.header_timeout_s),
                lifespan="off",
                log_level="warning",
                log_config=None,  # uvicorn's records go to the root logger's format
                access_log=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            )
        )

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen, report the bound port (``task_status``), serve until :meth:`stop`."""
        sock = listen(self.settings.host, self.settings.port)
        port: int = sock.getsockname()[1]
        if not self.settings.authenticates and self._stored is None:
            logger.warning(
                "no tokens configured: HTTP serves loopback only, and every local process "
                "that can reach it acts as the local user"
            )
        async with self.sessions.run():
            task_status.started(port)
            await self._uvicorn.serve(sockets=[sock])

    def stop(self) -> None:
        """Ask the server to stop (open streams get a grace period, then are closed)."""
        self._uvicorn.should_exit = True


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on *host*:*port* (port 0: any free one).

    Raises:
        ListenError: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ListenError(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return sock
