"""A dashboard over an in-memory engine, and an HTTP client for it (no socket)."""

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2

from taskloom.engine.dag import Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import RunStore
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.mount import ui_app
from taskloom.server.http import HttpSettings
from taskloom.server.http.authentication import Authenticator
from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.tokens import StoredTokens
from taskloom.testing import FakeClock
from taskloom.validation import JsonSchemaValidator

ANN = "ann-secret-token-0001"
BOB = "bob-secret-token-0002"
READER = "reader-token-0003"
TOKENS = {ANN: "ann", BOB: "bob"}


@dataclass
class Site:
    """The engine behind the dashboard, and a client that speaks to it."""

    manager: TaskManager
    runs: RunStore
    clock: FakeClock
    http: httpx2.AsyncClient
    app: Any
    """The dashboard's ASGI app (for a client of another address)."""

    async def page(self, path: str, token: str | None = ANN, **kwargs: Any) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.http.get(path, headers=headers, **kwargs)

    async def post(
        self, path: str, data: Mapping[str, str], token: str | None = ANN
    ) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.http.post(path, data=dict(data), headers=headers)


@asynccontextmanager
async def site(
    *,
    tokens: Mapping[str, str] | None = TOKENS,
    workflows: Mapping[str, Workflow[Any]] | None = None,
    allow_actions: bool = True,
    operator: bool = False,
    limits: HttpSettings | None = None,
    limiter: RateLimiter | None = None,
    client: tuple[str, int] = ("127.0.0.1", 123),
    stored: StoredTokens | None = None,
    max_unfinished: int | None = None,
) -> AsyncIterator[Site]:
    """A dashboard on a fresh in-memory store (tokens ``None``: no authentication;
    *stored*: tokens with scopes), throttled as *limits* say (sharing *limiter*) if
    given, called from *client*."""
    store = InMemoryTaskStore()
    clock = FakeClock()
    manager = TaskManager(store, clock=clock, validator=JsonSchemaValidator())
    authenticator = (
        Authenticator(HttpSettings(tokens=dict(tokens or {})), stored) if tokens or stored else None
    )
    app = ui_app(
        manager,
        store,
        workflows or {},
        ChangeHub(),
        authenticator=authenticator,
        allow_actions=allow_actions,
        operator=operator,
        http=limits,
        limiter=limiter,
        max_unfinished=max_unfinished,
    )
    transport = httpx2.ASGITransport(app=app, client=client)
    async with httpx2.AsyncClient(transport=transport, base_url="http://ui.test") as http:
        yield Site(manager, store, clock, http, app)
