"""Streamable HTTP sessions, each a connection of the TaskServer acting for one principal.

The SDK's ``StreamableHTTPSessionManager`` drives one ``Server`` for every session, but a
taskloom connection is a ``Server`` of its own (its owner, its watched outgoing stream,
its task followers: ADR 0007). So this manager keeps the SDK's transport per session
and hands its stream pair to :meth:`TaskServer.serve` with the session's principal: the
"answered" signal of the ``Outbox`` then works as on stdio (a follower waits until the
``CreateTaskResult`` has been handed to the transport before it sends anything on the
session's standalone GET stream).

A session belongs to the principal that opened it: another principal presenting its id
gets 404, as if it did not exist. A POST body that is not one JSON-RPC message is
answered before the SDK reads it (``envelope``). 2026-07-28 requests (no session, one request per POST)
are served by a per-principal ``Server`` with no stream of its own.

A session acts for the grant that opened it and ends with it (ADR 0037): once its token
is revoked or expires, the session is closed (its streams end, its handlers are
cancelled, its id is 404). A request reusing the id of one of the session's requests
still in flight is refused ``-32600`` naming the id (``inflight``).
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server._streamable_http_modern import handle_modern_request  # pinned SDK
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.message import SessionMessage
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from taskloom.engine.scopes import EVERYTHING, Grant, Scopes
from taskloom.server.app import TaskServer
from taskloom.server.errors import QUOTA_EXCEEDED
from taskloom.server.generation import Generation
from taskloom.server.http.envelope import checked
from taskloom.server.http.grant_watch import GrantWatch, LiveGrant
from taskloom.server.http.inflight import InFlight
from taskloom.server.http.outage_status import store_outage_status
from taskloom.server.http.responses import refusal
from taskloom.server.http.settings import HttpSettings, is_loopback
from taskloom.server.push import Outbox, TaskFollowers
from taskloom.server.streams import ClosesOnExit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Session:
    transport: StreamableHTTPServerTransport
    grant: Grant | None
    in_flight: InFlight


class HttpSessions:
    """Routes each request to its session (opening one on ``initialize``) or, for
    2026-07-28, to the principal's request server."""

    def __init__(
        self,
        task_server: TaskServer,
        settings: HttpSettings,
        watch: GrantWatch | None = None,
        *,
        store_wait_s: float = 5.0,
    ) -> None:
        """*watch* ends a session once the grant that opened it ends (``None``: never);
        *store_wait_s* is the store's wait: a POST's status is held back that long (and a
        second) for an answer of "store unavailable", which is HTTP 503."""
        self._task_server = task_server
        self._watch = watch if watch is not None else GrantWatch()
        self._settings = settings
        self._hold_s = store_wait_s + 1.0
        self._security = _security(settings.host)
        self._sessions: dict[str, _Session] = {}
        self._request_servers: dict[Grant | None, Server[Any]] = {}
        self._task_group: TaskGroup | None = None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Serve sessions while inside; close every one on exit (their tasks go on)."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            try:
                yield
            finally:
                # Each session's transport closes before its handlers are cancelled:
                # a cancelled handler's last answer ("Connection closed") then fails
                # at once instead of waiting out the SDK's second for a reader gone.
                for session_id in list(self._sessions):
                    await self._discard(session_id)
                task_group.cancel_scope.cancel()
                self._task_group = None
                self._sessions.clear()

    async def handle(
        self, live: LiveGrant | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Serve one HTTP request of *live* (already authenticated and admitted; ``None``:
        the local user); a POST answered "store unavailable" is HTTP 503."""
        if scope["method"] != "POST":
            await self._handle(live, scope, receive, send)
            return
        async with store_outage_status(send, hold_s=self._hold_s) as answer:
            await self._handle(live, scope, receive, answer)

    async def _handle(
        self, live: LiveGrant | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        grant = live.grant if live is not None else None
        headers = Headers(scope=scope)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if version is not None and Generation.of(version) is Generation.MODERN:
            server = self._request_server(grant)
            await handle_modern_request(server, self._security, False, {}, scope, receive, send)
            return
        request_id: str | int | None = None
        if scope["method"] == "POST":
            body = await checked(scope, receive, send)  # the SDK's own answers leak
            if body is None:
                return
            receive, request_id = body.receive, body.request_id
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            await self._open(live, scope, receive, send)
            return
        session = self._sessions.get(session_id)
        if session is None or session.grant != grant:
            await refusal(404, "Session not found")(scope, receive, send)
            return
        if request_id is not None and not session.in_flight.claim(request_id):
            message = f"Invalid request: request id {request_id!r} is still in flight"
            await _refuse_id(request_id, message)(scope, receive, send)
            return
        try:
            await session.transport.handle_request(scope, receive, send)
        finally:
            if request_id is not None:
                session.in_flight.served(request_id)
        if session.transport.is_terminated:  # the client ended it (DELETE)
            await self._discard(session_id)

    async def _open(
        self, live: LiveGrant | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        grant = live.grant if live is not None else None
        refused = self._refusal(grant)
        if refused is not None:
            await refused(scope, receive, send)
            return
        session_id = uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            security_settings=self._security,
            idle_timeout=self._settings.session_idle_s,
        )
        in_flight = InFlight()
        self._sessions[session_id] = _Session(transport, grant, in_flight)
        opened = False
        try:
            await self._group().start(self._serve_session, session_id, transport, live, in_flight)
            status = await _answer(transport, scope, receive, send)
            opened = status is not None and status < 400
        finally:
            if not opened:
                await self._discard(session_id)
        if opened:
            logger.info("session %s opened for %s", session_id[:8], _who(grant))

    def _refusal(self, grant: Grant | None) -> Response | None:
        """Why *grant* may not open one more session (``None``: it may): its own
        sessions first, so a principal at its cap hears of its cap, not of others."""
        most = self._settings.max_sessions_per_principal
        if grant is not None and self._open_by(grant.principal) >= most:
            logger.warning("refusing a new session: %s has %d open", grant.principal, most)
            message = (
                f"Too many open sessions: at most {most} per principal; close some "
                "(HTTP DELETE) or let them idle out"
            )
            return refusal(429, message, code=QUOTA_EXCEEDED)
        if len(self._sessions) >= self._settings.max_sessions:
            logger.warning("refusing a new session: %d are open", len(self._sessions))
            return refusal(503, "Too many open sessions", code=INTERNAL_ERROR)
        return None

    def _open_by(self, principal: str) -> int:
        return sum(
            1
            for session in self._sessions.values()
            if session.grant is not None and session.grant.principal == principal
        )

    async def _serve_session(
        self,
        session_id: str,
        transport: StreamableHTTPServerTransport,
        live: LiveGrant | None,
        in_flight: InFlight,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        grant = live.grant if live is not None else None
        try:
            async with transport.connect() as (read_stream, write_stream):
                task_status.started()
                with (
                    transport.idle_scope or anyio.CancelScope(),
                    self._watch.guard(live, "session", request=False) as held,
                ):
                    owner, scopes = _acting(grant)
                    await self._task_server.serve(
                        in_flight.reads(read_stream),
                        in_flight.writes(write_stream),
                        owner=owner,
                        scopes=scopes,
                    )
                if held.ending is not None:
                    logger.info("session %s ended: its token was %s", session_id[:8], held.ending)
        except Exception:
            logger.exception("session %s failed", session_id[:8])
        finally:
            await self._discard(session_id)

    async def _discard(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and not session.transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await session.transport.terminate()

    def _request_server(self, grant: Grant | None) -> Server[Any]:
        server = self._request_servers.get(grant)
        if server is None:
            # One request per POST: nothing can be pushed, so followers write nowhere.
            followers = TaskFollowers(self._task_server.manager, Outbox(_Nowhere()), self._group())
            server = self._task_server.connection_server(followers, *_acting(grant))
            self._request_servers[grant] = server
        return server

    def _group(self) -> TaskGroup:
        if self._task_group is None:
            raise RuntimeError("HttpSessions.run() is not active")
        return self._task_group


def _acting(grant: Grant | None) -> tuple[str | None, Scopes]:
    """The owner and scopes a connection of *grant* acts with."""
    return (grant.principal, grant.scopes) if grant is not None else (None, EVERYTHING)


def _refuse_id(request_id: str | int, message: str) -> Response:
    """HTTP 400 with the JSON-RPC error ``-32600`` answering the request *request_id*."""
    body = JSONRPCError(
        jsonrpc="2.0", id=request_id, error=ErrorData(code=INVALID_REQUEST, message=message)
    )
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=400,
        media_type="application/json",
    )


def _who(grant: Grant | None) -> str:
    return grant.principal if grant is not None else "the local user"


async def _answer(
    transport: StreamableHTTPServerTransport, scope: Scope, receive: Receive, send: Send
) -> int | None:
    """Let *transport* answer; the HTTP status it answered with (``None``: none)."""
    status: int | None = None

    async def watched(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await transport.handle_request(scope, receive, watched)
    return status


def _security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection (Host and Origin checks) when bound to loopback."""
    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


class _Nowhere(ClosesOnExit):
    """A write stream that drops everything (for servers with no stream to push on)."""

    async def aclose(self) -> None:
        """Nothing to close."""

    async def send(self, item: SessionMessage, /) -> None:
        """Drop *item*."""
