"""A TaskServer on a real uvicorn server (127.0.0.1, ephemeral port) and its clients."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from taskloom.server import TaskServer
from taskloom.server.generation import TASKS_EXTENSION
from taskloom.server.http import HttpService, HttpSettings
from tests.server.client import LEGACY, LegacyClient, open_client

ANN = "ann-secret-token-0001"
BOB = "bob-secret-token-0002"
TOKENS = {ANN: "ann", BOB: "bob"}
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


@asynccontextmanager
async def serving(task_server: TaskServer, **settings: Any) -> AsyncIterator[str]:
    """Serve *task_server* over HTTP while inside; yields the endpoint's URL."""
    service = HttpService(task_server, HttpSettings(port=0, **{"tokens": TOKENS, **settings}))
    async with anyio.create_task_group() as task_group:
        with anyio.fail_after(10):
            port = await task_group.start(service.serve)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            service.stop()


@asynccontextmanager
async def http_client(
    url: str, token: str | None, *, elicitation_callback: ElicitationFnT | None = None
) -> AsyncIterator[LegacyClient]:
    """A 2025-11-25 client over Streamable HTTP presenting *token*."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    async with (
        create_mcp_http_client(headers=headers, timeout=httpx2.Timeout(20)) as http,
        streamable_http_client(url, http_client=http) as (read_stream, write_stream),
        open_client(read_stream, write_stream, elicitation_callback=elicitation_callback) as client,
    ):
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": ACCEPT}


def initialize_body() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


def modern_request(
    method: str, params: dict[str, Any], request_id: int = 1, *, tasks: bool = False
) -> dict[str, Any]:
    """A 2026-07-28 request: its ``_meta`` envelope declares the version (and, with
    *tasks*, the tasks extension)."""
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": envelope},
    }


def modern_headers(token: str, method: str, name: str | None = None) -> dict[str, str]:
    headers = {**bearer(token), "Mcp-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def audit_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The fields of every audit record captured so far, oldest first."""
    return [dict(r.fields) for r in caplog.records if r.name == "taskloom.audit"]  # type: ignore[attr-defined]
