"""``subscriptions/listen`` on a host server mounted in a Starlette app, over Streamable
HTTP (a real uvicorn server on 127.0.0.1): one stream carries the task's changes and the
host's own event."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Mount

from tests.embedded.host import existing_server
from tests.helpers import eventually, free_port
from tests.server import flows
from tests.server.http_support import ACCEPT, MODERN, modern_request

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def mounted(mcp: MCPServer[Any]) -> AsyncIterator[str]:
    """*mcp* mounted at ``/tools`` of a Starlette app on uvicorn; the MCP endpoint's URL."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.session_manager.run():  # enters the MCP server's lifespan
            yield

    app = Starlette(routes=[Mount("/tools", mcp.streamable_http_app())], lifespan=lifespan)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(server.serve)
        try:
            await eventually(lambda: _started(server), within_s=20, every_s=0.02)
            yield f"http://127.0.0.1:{port}/tools/mcp"
        finally:
            server.should_exit = True


async def _started(server: uvicorn.Server) -> bool:
    return server.started


def headers(method: str, name: str | None = None) -> dict[str, str]:
    found = {"Accept": ACCEPT, "Mcp-Protocol-Version": MODERN, "Mcp-Method": method}
    return found if name is None else {**found, "Mcp-Name": name}


def messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response (JSON, or the ``data:`` lines of SSE)."""
    if body.lstrip().startswith("{"):
        return [json.loads(body)]
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


async def test_a_listen_over_http_carries_task_changes_and_host_events(tmp_path: Path) -> None:
    flows.GATES.clear()
    call = {"name": "wait_gate", "arguments": {"name": "http"}}
    frames: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with (
            mounted(existing_server(tmp_path / "t.db")) as url,
            httpx2.AsyncClient(timeout=20) as http,
        ):
            created = await http.post(
                url,
                json=modern_request("tools/call", call, tasks=True),
                headers=headers("tools/call", "wait_gate"),
            )
            [answer] = messages(created.text)
            task_id = answer["result"]["taskId"]
            asked = {"notifications": {"taskIds": [task_id], "toolsListChanged": True}}
            listen = modern_request("subscriptions/listen", asked, 7, tasks=True)

            def seen(method: str) -> list[dict[str, Any]]:
                return [frame for frame in frames if frame.get("method") == method]

            async with http.stream(
                "POST", url, json=listen, headers=headers("subscriptions/listen")
            ) as stream:
                async for line in stream.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    frames.append(json.loads(line[5:]))
                    statuses = [f["params"]["status"] for f in seen("notifications/tasks")]
                    if statuses == ["working"]:
                        flows.gate("http").set()
                    elif statuses == ["working", "completed"] and not seen(
                        "notifications/tools/list_changed"
                    ):
                        announce = {"name": "announce", "arguments": {}}
                        await http.post(
                            url,
                            json=modern_request("tools/call", announce, 8),
                            headers=headers("tools/call", "announce"),
                        )
                    if seen("notifications/tools/list_changed"):
                        break
    ack = frames[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id], "toolsListChanged": True}
    subscription = {"io.modelcontextprotocol/subscriptionId": 7}
    assert all(frame["params"]["_meta"] == subscription for frame in frames)
