"""The ASGI application: authenticate, rate-limit, bound the body, then the session.

Every refusal is an HTTP status with a JSON-RPC error body: 401 with
``WWW-Authenticate`` (missing or unknown bearer token), 403 (a JWT without a required
scope), 503 with ``Retry-After`` (a JWT that cannot be checked: the issuer's keys are
out of reach), 429 with ``Retry-After`` (the
principal's request rate), 413 (the body size), 404 (another path, or a session that
is not the caller's). Tokens never reach a log; principals may.

Every MCP request is served under a guard of its grant (``guarded``, ADR 0037): a
token revoked or expired while a request is open (an event stream, a wait for a
result) ends it, and so does stopping the server.

``GET /metrics`` (when the service has metrics) answers the Prometheus text, to the same
callers as the MCP endpoint: any valid bearer token when tokens are configured, else
anyone who can reach the loopback address. It is not rate-limited (scrapes are few).

With OAuth, the protected resource metadata (RFC 9728) is served to anyone, unlimited.

``/ui`` and below go to the dashboard, when the service has one (ADR 0030): it
authenticates its own requests (a bearer token or its sign-in cookie) and charges each
to its principal's allowance in the same limiter as the MCP endpoint's (ADR 0036);
bodies are bounded as the MCP endpoint's.
"""

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TypedDict, Unpack

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from taskloom.engine.errors import StoreUnavailableError
from taskloom.server.errors import retry_after, store_unavailable
from taskloom.server.http.authentication import Authenticator, Refusal
from taskloom.server.http.grant_watch import LiveGrant
from taskloom.server.http.guarded import serve_guarded
from taskloom.server.http.limits import BodyLimit, RateLimiter
from taskloom.server.http.responses import refusal
from taskloom.server.http.sessions import HttpSessions
from taskloom.server.http.settings import HttpSettings
from taskloom.server.http.tokens import StoredTokens

logger = logging.getLogger(__name__)
WELL_KNOWN_PREFIX = "/.well-known/"
UI_PATH = "/ui"
METRICS_PATH = "/metrics"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EndpointParts(TypedDict, total=False):
    """What an endpoint (and the service that runs it) may be given, each optional:
    *metrics* renders the Prometheus text served at ``/metrics``; *stored_tokens* checks
    the database's tokens (then every request must present a token, static or stored);
    *ui* is the dashboard served under ``/ui``; *limiter* is the per-principal rate
    limiter the dashboard shares (else one is made from the settings); *authenticator*
    is the one the dashboard shares (else one is made from the settings and
    *stored_tokens*)."""

    metrics: Callable[[], str] | None
    stored_tokens: StoredTokens | None
    ui: ASGIApp | None
    limiter: RateLimiter | None
    authenticator: Authenticator | None


def check_parts(callee: str, parts: Mapping[str, object]) -> None:
    """Refuse a keyword that is none of :class:`EndpointParts`, as Python refuses an
    unknown keyword argument (``**parts`` would otherwise take a misspelled one
    silently).

    Raises:
        TypeError: a key of *parts* is not one of ``EndpointParts``.
    """
    unknown = sorted(set(parts) - EndpointParts.__optional_keys__)
    if unknown:
        raise TypeError(f"{callee}() got an unexpected keyword argument {unknown[0]!r}")


class HttpEndpoint:
    """The Streamable HTTP endpoint of a TaskServer, as an ASGI app (``http`` scopes)."""

    def __init__(
        self, sessions: HttpSessions, settings: HttpSettings, **parts: Unpack[EndpointParts]
    ) -> None:
        """The endpoint of *sessions*, with the optional *parts*."""
        check_parts("HttpEndpoint", parts)
        ui, limiter = parts.get("ui"), parts.get("limiter")
        authenticator = parts.get("authenticator")
        self._sessions = sessions
        self._ui = BodyLimit(ui, settings.max_body_bytes) if ui is not None else None
        self._metrics = parts.get("metrics")
        self._path = settings.path
        self._auth = (
            authenticator
            if authenticator is not None
            else Authenticator(settings, parts.get("stored_tokens"))
        )
        self._well_known: ASGIApp | None = None
        if settings.oauth is not None:
            from taskloom.server.http.resource_metadata import metadata_app  # the SDK

            self._well_known = metadata_app(settings.oauth)
        self._max_body = settings.max_body_bytes
        self._limiter = limiter if limiter is not None else principal_limiter(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no lifespan or websocket support: the host runs with lifespan off
        path, mcp = scope["path"].rstrip("/"), self._path.rstrip("/")
        if self._well_known is not None and path.startswith(WELL_KNOWN_PREFIX):
            await self._well_known(scope, receive, send)
            return
        if self._ui is not None and mcp != UI_PATH and _under(path, UI_PATH):
            await self._ui(scope, receive, send)
            return
        metrics = self._metrics if path == METRICS_PATH != mcp else None  # MCP comes first
        if path != mcp and metrics is None:
            await refusal(404, f"Not found: the MCP endpoint is {self._path}")(scope, receive, send)
            return
        live: LiveGrant | None = None
        if self._auth:
            try:
                found = await self._auth.credential(Headers(scope=scope).get("authorization"))
            except StoreUnavailableError as error:  # a stored token could not be looked up
                await _store_unavailable(error, scope, receive, send)
                return
            if isinstance(found, Refusal):
                await _refuse(found, scope, receive, send)
                return
            live = found
        owner = live.grant.principal if live is not None else None
        if metrics is not None:
            await _serve_metrics(metrics, scope, receive, send)
            return
        if self._limiter is not None:
            wait_s = self._limiter.admit(owner)
            if wait_s > 0:
                logger.warning("rate limit reached by %s", owner or "the local user")
                message = (
                    f"Too many requests: at most {self._limiter.per_minute:g} a minute; "
                    f"retry in {RateLimiter.retry_after(wait_s)} s"
                )
                retry = {"Retry-After": RateLimiter.retry_after(wait_s)}
                await refusal(429, message, headers=retry)(scope, receive, send)
                return
        serve = BodyLimit(partial(self._sessions.handle, live), self._max_body)
        challenge = self._auth.ended_challenge
        await serve_guarded(
            self._auth.watch, live, serve, scope, receive, send, challenge=challenge
        )


def principal_limiter(settings: HttpSettings) -> RateLimiter | None:
    """The per-principal limiter *settings* ask for (``None``: unlimited)."""
    per_minute = settings.rate_per_minute
    return RateLimiter(per_minute) if per_minute is not None else None


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


async def _serve_metrics(
    render: Callable[[], str], scope: Scope, receive: Receive, send: Send
) -> None:
    if scope["method"] not in ("GET", "HEAD"):
        refuse = refusal(405, "Method not allowed: GET /metrics", headers={"Allow": "GET"})
        await refuse(scope, receive, send)
        return
    response = PlainTextResponse(render(), media_type=METRICS_CONTENT_TYPE)
    await response(scope, receive, send)


async def _store_unavailable(
    error: StoreUnavailableError, scope: Scope, receive: Receive, send: Send
) -> None:
    """503 with ``Retry-After`` and the JSON-RPC error ``-32032`` (ADR 0038)."""
    answer = store_unavailable(error.retry_after_s)
    headers = {"Retry-After": str(retry_after(error.retry_after_s))}
    response = refusal(
        503, answer.error.message, code=answer.error.code, headers=headers, data=answer.error.data
    )
    await response(scope, receive, send)


async def _refuse(found: Refusal, scope: Scope, receive: Receive, send: Send) -> None:
    await refusal(found.status, found.message, headers=found.headers)(scope, receive, send)
