"""`python -m taskloom serve --http` as a real process on 127.0.0.1, two principals with
bearer tokens: a workflow runs end to end, another is cancelled mid-phase (and no node
starts after), and input requests are answered by elicitation (2025-11-25) and by
``tasks/update`` (2026-07-28), each principal seeing only its own tasks."""

import json
import signal
import sys
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from tests.helpers import checkout_env, eventually, free_port, until_http_listening
from tests.server.client import LegacyClient
from tests.server.http_support import ANN, BOB, bearer, http_client
from tests.server.modern_client import EXT, MODERN


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[str]:
    """A real HTTP server on a free port of 127.0.0.1, with the test workflows; its URL.
    Interrupted (SIGINT) and awaited on the way out."""
    address = f"127.0.0.1:{free_port()}"
    env = checkout_env() | {
        "TASKLOOM_HTTP": address,
        "TASKLOOM_TOKENS": f"ann:{ANN},bob:{BOB}",
        "TASKLOOM_WORKFLOWS": "tests.server.flows",
    }
    url = f"http://{address}/mcp"
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(url)
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()


class ModernHttp:
    """Raw 2026-07-28 requests over HTTP: the extension declared in each ``_meta``, the
    routing headers set, JSON or single-event SSE answers read."""

    def __init__(self, http: httpx2.AsyncClient, url: str, token: str) -> None:
        self._http = http
        self._url = url
        self._token = token
        self._ids = 0

    async def send(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        """The JSON-RPC response (``result`` or ``error``) to *method*."""
        self._ids += 1
        envelope = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
        }
        body = {
            "jsonrpc": "2.0",
            "id": self._ids,
            "method": method,
            "params": {**params, "_meta": envelope},
        }
        headers = {**bearer(self._token), "Mcp-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        response = await self._http.post(self._url, json=body, headers=headers)
        text = response.text
        if response.headers["content-type"].startswith("text/event-stream"):
            text = next(
                line.removeprefix("data: ")
                for line in text.splitlines()
                if line.startswith("data: {")
            )
        return json.loads(text)

    async def result(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        answer = await self.send(method, params, name)
        assert "result" in answer, answer
        return answer["result"]

    async def get(self, task_id: str) -> dict[str, Any]:
        got: dict[str, Any] = await self.result("tasks/get", {"taskId": task_id}, task_id)
        return got

    async def until(self, task_id: str, statuses: Collection[str]) -> dict[str, Any]:
        latest: dict[str, Any] = {}

        async def reached() -> bool:
            nonlocal latest
            latest = await self.get(task_id)
            return latest["status"] in statuses

        await eventually(reached, within_s=20, every_s=0.05)
        return latest


async def _until_status(client: LegacyClient, task_id: str, status: str) -> dict[str, Any]:
    latest: dict[str, Any] = {}

    async def reached() -> bool:
        nonlocal latest
        latest = await client.get(task_id)
        return bool(latest["status"] == status)

    await eventually(reached, within_s=20, every_s=0.05)
    return latest


def _attempt_starts(attempts: dict[str, Any]) -> dict[str, datetime | None]:
    """Node attempt -> its start, from ``task_attempts``' lines (``lane_0#1  cancelled
    2026-01-01 00:00:00.000 → ...``); ``None`` for an attempt still running."""
    lines = attempts["content"][0]["text"].splitlines()[1:]
    starts: dict[str, datetime | None] = {}
    for line in lines:
        node, outcome, day, time, *_ = line.split()
        start = datetime.fromisoformat(f"{day}T{time}").replace(tzinfo=UTC)
        starts[node] = None if outcome == "running" else start
    return starts


@pytest.mark.slow
async def test_a_real_http_server_runs_cancels_and_asks_for_two_principals(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def grace(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    with anyio.fail_after(90):
        async with (
            serving(tmp_path) as url,
            http_client(url, ANN) as ann,
            http_client(url, BOB, elicitation_callback=grace) as bob,
            httpx2.AsyncClient(timeout=20) as http,
        ):
            # Ann's workflow runs end to end: created as a task, polled, its result read.
            done = await ann.start("countdown", {"start": 4, "tick_s": 0})
            await _until_status(ann, done, "completed")
            result = await ann.result(done)
            assert result["structuredContent"] == {"counted": 4, "lanes": 4}

            # Another is cancelled while its lanes count; Bob can neither see nor cancel it.
            slow = await ann.start("countdown", {"start": 400, "tick_s": 0.05})

            async def counting() -> bool:
                message = (await ann.get(slow)).get("statusMessage", "")
                return str(message).startswith("phase 2/3 count")

            await eventually(counting, within_s=20, every_s=0.05)
            for method in ("tasks/get", "tasks/cancel", "tasks/result"):
                assert (await bob.error(method, {"taskId": slow})).code == -32602
            assert (await ann.get(slow))["status"] == "working"
            assert (await ann.cancel(slow))["status"] == "cancelled"
            cancelled_at = datetime.now(UTC)
            starts: dict[str, datetime | None] = {}

            async def settled() -> bool:  # every attempt ended (none reported running)
                nonlocal starts
                starts = _attempt_starts(await ann.call("task_attempts", {"task_id": slow}))
                return None not in starts.values()

            await eventually(settled, within_s=20, every_s=0.05)
            assert {"plan#1", "lane_0#1", "lane_1#1", "lane_2#1", "lane_3#1"} <= set(starts)
            assert not any(node.startswith("report#") for node in starts)
            assert all(s is not None and s <= cancelled_at for s in starts.values()), starts
            assert (await ann.get(slow))["status"] == "cancelled"

            # Bob's question is answered through elicitation (2025-11-25).
            asking = await bob.start("ask", {"question": "Who are you?"})
            await _until_status(bob, asking, "input_required")
            assert (await ann.error("tasks/get", {"taskId": asking})).code == -32602
            answered = await bob.result(asking)
            assert answered["content"] == [{"type": "text", "text": "Hello, Grace!"}]
            assert asked == ["Who are you?"]

            # Ann's is answered with tasks/update (2026-07-28); Bob's update is refused.
            ann_modern, bob_modern = ModernHttp(http, url, ANN), ModernHttp(http, url, BOB)
            created = await ann_modern.result("tools/call", {"name": "ask", "arguments": {}}, "ask")
            assert created["resultType"] == "task", created
            modern = created["taskId"]
            waiting = await ann_modern.until(modern, {"input_required"})
            [key] = waiting["inputRequests"]
            answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
            update = {"taskId": modern, "inputResponses": answer}
            refused = await bob_modern.send("tasks/update", update, modern)
            assert refused["error"]["code"] == -32602
            assert (await ann_modern.get(modern))["status"] == "input_required"
            acked = await ann_modern.result("tasks/update", update, modern)
            assert acked["resultType"] == "complete"
            finished = await ann_modern.until(modern, {"completed", "failed", "cancelled"})
            assert finished["status"] == "completed"
            assert finished["result"]["content"] == [{"type": "text", "text": "Hello, Ada!"}]

            # Each principal lists only its own tasks.
            assert [t["taskId"] for t in (await bob.list_tasks())["tasks"]] == [asking]
            listed = {t["taskId"] for t in (await ann.list_tasks())["tasks"]}
            assert {done, slow, modern} <= listed
            assert asking not in listed
    log = (tmp_path / "stderr.log").read_text()
    assert ANN not in log
    assert BOB not in log
    assert "Traceback" not in log
