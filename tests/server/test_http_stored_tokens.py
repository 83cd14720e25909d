"""Database tokens over real HTTP: used, scoped, expired and revoked (ADR 0028)."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from taskloom.bootstrap import Engine
from taskloom.engine.scopes import Scopes
from taskloom.engine.tokens import TokenVerifier, mint
from taskloom.server import TaskServer
from taskloom.server.http import HttpService, HttpSettings
from taskloom.server.scopes import FORBIDDEN
from taskloom.testing import FakeClock
from tests.server import flows
from tests.server.http_support import ANN, bearer, http_client, initialize_body


@asynccontextmanager
async def _serving(task_server: TaskServer, engine: Engine, clock: FakeClock) -> AsyncIterator[str]:
    assert engine.tokens is not None
    verifier = TokenVerifier(engine.tokens, clock)
    settings = HttpSettings(port=0, tokens={ANN: "ann"}, stored_tokens=True)
    service = HttpService(task_server, settings, stored_tokens=verifier)
    async with anyio.create_task_group() as task_group:
        with anyio.fail_after(10):
            port = await task_group.start(service.serve)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            service.stop()


async def _token(engine: Engine, clock: FakeClock, principal: str, **options: Any) -> str:
    assert engine.tokens is not None
    token, record = mint(principal, now=clock.now(), **options)
    await engine.tokens.add_token(record)
    return token


async def test_a_token_works_until_it_is_revoked_then_the_next_request_is_401(
    task_server: TaskServer, engine: Engine, clock: FakeClock
) -> None:
    token = await _token(engine, clock, "carol", expires_in=timedelta(days=30))
    async with _serving(task_server, engine, clock) as url:
        async with http_client(url, token) as carol:
            task_id = await carol.start("countdown", {"start": 2, "tick_s": 0})
            assert (await carol.result(task_id))["structuredContent"]["counted"] == 2
            assert engine.tokens is not None
            await engine.tokens.revoke_token(token[3:15], clock.now())
            with pytest.raises(MCPError, match="bearer token is not valid"):
                await carol.get(task_id)  # the same open session: refused at once
        async with http_client(url, ANN) as ann:  # a static token keeps working
            assert (await ann.list_tasks())["tasks"] == []  # carol's task is not ann's


async def test_a_token_is_refused_from_its_expiry_on(
    task_server: TaskServer, engine: Engine, clock: FakeClock
) -> None:
    token = await _token(engine, clock, "carol", expires_in=timedelta(hours=1))
    async with _serving(task_server, engine, clock) as url, httpx2.AsyncClient(timeout=20) as http:
        before = await http.post(url, json=initialize_body(), headers=bearer(token))
        clock.advance(3600)
        after = await http.post(url, json=initialize_body(), headers=bearer(token))
        forged = await http.post(url, json=initialize_body(), headers=bearer(token + "x"))
    assert before.status_code == 200
    assert after.status_code == forged.status_code == 401
    assert token not in after.text


async def test_workflow_scopes_narrow_the_tools_listed_and_callable(
    task_server: TaskServer, engine: Engine, clock: FakeClock
) -> None:
    token = await _token(engine, clock, "dan", scopes=Scopes.parse(["workflows:countdown"]))
    async with _serving(task_server, engine, clock) as url, http_client(url, token) as dan:
        names = {tool["name"] for tool in (await dan.request("tools/list"))["tools"]}
        assert "countdown" in names
        assert "gated" not in names
        error = await dan.error("tools/call", {"name": "gated", "arguments": {"gate": "x"}})
        assert error.message == "Unknown tool: gated"
        task_id = await dan.start("countdown", {"start": 1, "tick_s": 0})
        assert (await dan.result(task_id))["structuredContent"]["counted"] == 1


async def test_a_read_only_token_reads_but_starts_cancels_and_answers_nothing(
    task_server: TaskServer, engine: Engine, clock: FakeClock
) -> None:
    writer = await _token(engine, clock, "erin")
    reader = await _token(engine, clock, "erin", scopes=Scopes.parse(["read"]))
    async with (
        _serving(task_server, engine, clock) as url,
        http_client(url, writer) as erin,
        http_client(url, reader) as viewer,
    ):
        task_id = await erin.start("gated", {"gate": "read-only"})
        assert (await viewer.get(task_id))["status"] == "working"
        assert [t["taskId"] for t in (await viewer.list_tasks())["tasks"]] == [task_id]
        names = {tool["name"] for tool in (await viewer.request("tools/list"))["tools"]}
        assert {"task_status", "task_result", "task_list"} <= names
        assert not names & {"countdown", "gated", "task_cancel", "task_answer"}
        for method, params in (
            ("tasks/cancel", {"taskId": task_id}),
            ("tools/call", {"name": "countdown", "arguments": {"start": 1}}),
            ("tools/call", {"name": "countdown", "arguments": {"start": 1}, "task": {}}),
            ("tools/call", {"name": "task_cancel", "arguments": {"task_id": task_id}}),
        ):
            error = await viewer.error(method, params)
            assert error.code == FORBIDDEN
            assert error.message.startswith("Forbidden: this token is read-only")
        assert (await erin.get(task_id))["status"] == "working"
        flows.gate("read-only").set()
        assert (await viewer.result(task_id))["structuredContent"] == {"opened": "read-only"}
