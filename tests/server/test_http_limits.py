"""The HTTP endpoint's refusals: 401, foreign sessions, 413, 429, result size, Mcp-Name."""

import json
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from taskloom.bootstrap import Engine
from taskloom.server import ServerSettings, TaskServer
from taskloom.server.http import HttpService, HttpSettings
from taskloom.server.http.service import ListenError
from tests.helpers import eventually
from tests.server.http_support import (
    ANN,
    BOB,
    bearer,
    http_client,
    initialize_body,
    modern_headers,
    modern_request,
    serving,
)


def _error(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC error of a JSON or single-event SSE response."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(
            line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: {")
        )
    error: dict[str, Any] = json.loads(text)["error"]
    return error


async def test_401_names_the_scheme_and_says_whether_a_token_was_sent(
    task_server: TaskServer,
) -> None:
    async with serving(task_server) as url, httpx2.AsyncClient() as http:
        missing = await http.post(url, json=initialize_body())
        wrong = await http.post(url, json=initialize_body(), headers=bearer(ANN + "x"))
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="taskloom"'
    assert wrong.headers["www-authenticate"] == 'Bearer realm="taskloom", error="invalid_token"'
    assert _error(missing)["message"] == "Unauthorized: send Authorization: Bearer <token>"
    assert ANN not in wrong.text


async def test_a_session_answers_only_the_principal_that_opened_it(
    task_server: TaskServer,
) -> None:
    async with serving(task_server) as url, httpx2.AsyncClient(timeout=20) as http:
        opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        foreign = await http.post(url, json=ping, headers={**bearer(BOB), **session})
        own = await http.post(url, json=ping, headers={**bearer(ANN), **session})
    assert opened.status_code == 200
    assert foreign.status_code == 404
    assert _error(foreign)["message"] == "Session not found"
    assert own.status_code == 200


async def test_an_oversized_body_is_413_before_anything_runs(task_server: TaskServer) -> None:
    async with serving(task_server, max_body_bytes=2_000) as url:
        async with httpx2.AsyncClient(timeout=20) as http:
            body = initialize_body()
            body["params"]["clientInfo"]["name"] = "x" * 3_000
            response = await http.post(url, json=body, headers=bearer(ANN))
        assert response.status_code == 413
        assert _error(response)["message"] == (
            "Request body too large: this server accepts at most 2000 bytes"
        )
        async with http_client(url, ANN) as client:  # a small request still passes
            with pytest.raises(MCPError, match="Request body too large"):
                await client.call("countdown", {"start": 1, "tick_s": 0, "x": "y" * 3_000})
            assert (await client.list_tasks())["tasks"] == []


async def test_a_principal_over_its_rate_gets_429_with_retry_after(
    task_server: TaskServer,
) -> None:
    async with serving(task_server, rate_per_minute=3) as url, httpx2.AsyncClient() as http:
        answers = [
            await http.post(url, json=initialize_body(), headers=bearer(ANN)) for _ in range(4)
        ]
        other = await http.post(url, json=initialize_body(), headers=bearer(BOB))
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert 1 <= int(refused.headers["retry-after"]) <= 20
    assert _error(refused)["message"].startswith("Too many requests: at most 3 a minute; retry in")
    assert other.status_code == 200  # the limit is per principal


async def test_sessions_beyond_the_limit_are_503_until_one_closes(
    task_server: TaskServer,
) -> None:
    async with serving(task_server, max_sessions=1) as url, httpx2.AsyncClient() as http:
        first = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        refused = await http.post(url, json=initialize_body(), headers=bearer(BOB))
        session = {**bearer(ANN), "Mcp-Session-Id": first.headers["mcp-session-id"]}
        closed = await http.delete(url, headers=session)
        again = await http.post(url, json=initialize_body(), headers=bearer(BOB))
    assert (first.status_code, refused.status_code) == (200, 503)
    assert _error(refused)["message"] == "Too many open sessions"
    assert closed.status_code == 200
    assert again.status_code == 200


async def test_a_principal_at_its_session_cap_is_429_and_others_still_open_sessions(
    task_server: TaskServer,
) -> None:
    limits = {"max_sessions": 3, "max_sessions_per_principal": 2}
    async with serving(task_server, **limits) as url, httpx2.AsyncClient() as http:
        ann = [await http.post(url, json=initialize_body(), headers=bearer(ANN)) for _ in "abc"]
        bob = await http.post(url, json=initialize_body(), headers=bearer(BOB))
        session = {**bearer(ANN), "Mcp-Session-Id": ann[0].headers["mcp-session-id"]}
        await http.delete(url, headers=session)
        again = await http.post(url, json=initialize_body(), headers=bearer(ANN))
    assert [response.status_code for response in ann] == [200, 200, 429]
    assert _error(ann[2]) == {
        "code": -32031,
        "message": "Too many open sessions: at most 2 per principal; close some "
        "(HTTP DELETE) or let them idle out",
    }
    assert bob.status_code == 200
    assert again.status_code == 200  # a closed session frees its place


async def test_a_result_over_the_limit_is_an_error_saying_so(engine: Engine) -> None:
    small = TaskServer(
        engine.manager, engine.workflows, ServerSettings(recheck_s=None, max_result_bytes=1_500)
    )
    async with serving(small) as url, http_client(url, ANN) as client:
        error = await client.error("tools/list")
        assert error.code == types.INTERNAL_ERROR
        assert error.message.startswith("Result too large: ")
        assert error.message.endswith("bytes of JSON, over this server's limit of 1500")
        assert isinstance(error.data, dict)
        assert error.data["limit"] == 1_500
        assert error.data["size"] > 1_500
        assert (await client.list_tasks())["tasks"] == []  # small results still pass


async def test_mcp_name_must_match_the_task_id(task_server: TaskServer) -> None:
    async with serving(task_server) as url, httpx2.AsyncClient(timeout=20) as http:
        opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        session = {**bearer(ANN), "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": "t1"}}
        legacy_wrong = await http.post(url, json=get, headers={**session, "Mcp-Name": "t2"})
        legacy_without = await http.post(url, json=get, headers=session)
        request = modern_request("tasks/get", {"taskId": "t1"}, tasks=True)
        modern_wrong = await http.post(
            url, json=request, headers=modern_headers(ANN, "tasks/get", "t2")
        )
        modern_without = await http.post(
            url, json=request, headers=modern_headers(ANN, "tasks/get")
        )
        modern_right = await http.post(
            url, json=request, headers=modern_headers(ANN, "tasks/get", "t1")
        )
    assert _error(legacy_wrong)["code"] == types.HEADER_MISMATCH
    assert _error(legacy_without)["code"] == types.INVALID_PARAMS  # no such task: checked
    assert (modern_wrong.status_code, _error(modern_wrong)["code"]) == (400, types.HEADER_MISMATCH)
    assert (modern_without.status_code, _error(modern_without)["code"]) == (
        400,
        types.HEADER_MISMATCH,
    )
    assert _error(modern_right)["code"] != types.HEADER_MISMATCH


async def test_a_missing_extension_is_32021_before_a_mismatched_mcp_name(
    task_server: TaskServer,
) -> None:
    async with serving(task_server) as url, httpx2.AsyncClient(timeout=20) as http:
        answers = {}
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            params = {
                "taskId": "t1",
                **({"inputResponses": {}} if method == "tasks/update" else {}),
            }
            answers[method] = await http.post(
                url,
                json=modern_request(method, params),
                headers=modern_headers(ANN, method, "another-task"),
            )
    for answer in answers.values():
        assert _error(answer)["code"] == types.MISSING_REQUIRED_CLIENT_CAPABILITY, answer.text


async def test_2026_requests_act_for_their_principal(task_server: TaskServer) -> None:
    async with serving(task_server) as url:
        async with http_client(url, ANN) as ann:
            task_id = await ann.start("gated", {"gate": "never-opened"})
        async with httpx2.AsyncClient(timeout=20) as http:
            lists = {}
            for token in (ANN, BOB):
                call = modern_request("tools/call", {"name": "task_list", "arguments": {}})
                answer = await http.post(
                    url, json=call, headers=modern_headers(token, "tools/call", "task_list")
                )
                assert answer.status_code == 200, answer.text
                lists[token] = json.loads(answer.text)["result"]["content"][0]["text"]
    assert lists[ANN].startswith(task_id)
    assert lists[BOB] == "no tasks"


async def test_an_idle_session_is_closed(task_server: TaskServer) -> None:
    async with serving(task_server, session_idle_s=0.2) as url, httpx2.AsyncClient() as http:
        opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        session = {**bearer(ANN), "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

        async def expired() -> bool:
            return (await http.post(url, json=ping, headers=session)).status_code == 404

        await eventually(expired, within_s=10, every_s=0.3)


async def test_an_address_in_use_is_a_clear_error(task_server: TaskServer) -> None:
    async with serving(task_server) as url:
        port = int(url.split(":")[2].split("/")[0])
        service = HttpService(task_server, HttpSettings(port=port))
        with pytest.raises(ListenError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: "):
            await service.serve()


def test_without_tokens_http_binds_loopback_only() -> None:
    assert HttpSettings(host="::1").tokens == {}
    with pytest.raises(ValueError, match=r"refusing to serve HTTP on 0\.0\.0\.0 without tokens"):
        HttpSettings(host="0.0.0.0")
    assert HttpSettings(host="0.0.0.0", tokens={ANN: "ann"}).host == "0.0.0.0"
    assert ANN not in repr(HttpSettings(tokens={ANN: "ann"}))


async def test_without_tokens_the_local_user_is_served_with_a_warning(
    task_server: TaskServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(task_server, tokens={}) as url, http_client(url, None) as client:
        task_id = await client.start("countdown", {"start": 2, "tick_s": 0})
        assert (await client.result(task_id))["isError"] is False
    assert any("no tokens configured" in record.message for record in caplog.records)
