"""Running the endpoint under uvicorn, and stopping it.

Stopping (SIGINT, SIGTERM, :meth:`HttpService.stop`) ends every open event stream at
once, each closed properly, and lets other requests finish for a few seconds
(``grant_watch``): uvicorn never has to cancel a request, which it would log as an
``ERROR`` with a traceback.
"""

import logging
import socket
from typing import Unpack

import anyio
import uvicorn
from anyio.abc import TaskStatus

from taskloom.engine.errors import TaskloomError
from taskloom.server.app import TaskServer
from taskloom.server.http.authentication import Authenticator
from taskloom.server.http.endpoint import EndpointParts, HttpEndpoint, check_parts
from taskloom.server.http.grant_watch import GrantWatch
from taskloom.server.http.header_timeout import with_header_timeout
from taskloom.server.http.sessions import HttpSessions
from taskloom.server.http.settings import HttpSettings

logger = logging.getLogger(__name__)
GRACEFUL_SHUTDOWN_S = 5
STOP_WITHIN_S = GRACEFUL_SHUTDOWN_S + 2
"""The longest a stop waits for uvicorn to finish (it closes every stream first)."""


class ListenError(TaskloomError):
    """The endpoint cannot listen on its address (in use, not this machine's...)."""


class HttpService:
    """A TaskServer served over Streamable HTTP by uvicorn."""

    def __init__(
        self,
        task_server: TaskServer,
        settings: HttpSettings,
        *,
        store_wait_s: float = 5.0,
        **parts: Unpack[EndpointParts],
    ) -> None:
        """*task_server* served with *settings* and the endpoint's optional *parts*
        (``EndpointParts``; the authenticator's ``watch`` runs while serving);
        *store_wait_s*, the store's wait (see ``HttpSessions``)."""
        check_parts("HttpService", parts)
        self._stored = parts.get("stored_tokens")
        self.settings = settings
        auth = parts.get("authenticator")
        if auth is None:  # not `or`: an Authenticator that checks nothing is falsy
            auth = Authenticator(settings, self._stored)
        endpoint_parts: EndpointParts = {**parts, "authenticator": auth}
        self.watch = auth.watch
        self.sessions = HttpSessions(task_server, settings, self.watch, store_wait_s=store_wait_s)
        self._uvicorn = _Uvicorn(
            self.watch,
            uvicorn.Config(
                HttpEndpoint(self.sessions, settings, **endpoint_parts),
                host=settings.host,
                port=settings.port,
                http=with_header_timeout(settings.header_timeout_s),
                lifespan="off",
                log_level="warning",
                log_config=None,  # uvicorn's records go to the root logger's format
                access_log=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            ),
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
        async with self.sessions.run(), anyio.create_task_group() as group:
            group.start_soon(self.watch.run)
            task_status.started(port)
            await run_uvicorn(self._uvicorn, sock)
            group.cancel_scope.cancel()

    def stop(self) -> None:
        """Ask the server to stop (open streams get a grace period, then are closed)."""
        self._uvicorn.should_exit = True


class _Uvicorn(uvicorn.Server):
    """uvicorn, which ends the open streams (``GrantWatch.close``) as it starts stopping."""

    def __init__(self, watch: GrantWatch, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._watch = watch

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._watch.close()
        await super().shutdown(sockets)


def serving_uvicorn(watch: GrantWatch, config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that ends *watch*'s open streams as it starts stopping."""
    return _Uvicorn(watch, config)


async def run_uvicorn(server: uvicorn.Server, sock: socket.socket) -> None:
    """Serve on *sock* until *server* stops or this is cancelled. A cancel (the command
    line's SIGINT) asks uvicorn to stop, as its own signal handling would, and waits for
    it (bounded): cancelling uvicorn would cancel its open requests, each logged as an
    ``ERROR`` with a traceback."""
    stopped = anyio.Event()
    shield = anyio.CancelScope(shield=True)

    async def serve() -> None:
        try:
            with shield:
                await server.serve(sockets=[sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        try:
            await stopped.wait()
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_WITHIN_S):
                await stopped.wait()
            shield.cancel()


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
