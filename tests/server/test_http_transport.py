"""Streamable HTTP end to end: a real uvicorn server on 127.0.0.1, the SDK's HTTP client."""

import logging
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError

from taskloom.server import TaskServer
from tests.server import flows
from tests.server.http_support import ANN, BOB, audit_records, http_client, serving

RELATED = "io.modelcontextprotocol/related-task"


@pytest.fixture
async def url(task_server: TaskServer) -> AsyncIterator[str]:
    async with serving(task_server) as endpoint:
        yield endpoint


async def test_a_workflow_runs_end_to_end_with_progress_and_statuses(url: str) -> None:
    async with http_client(url, ANN) as client:
        assert "tasks" in client.initialize_result["capabilities"]
        tools = await client.request("tools/list")
        assert "countdown" in {tool["name"] for tool in tools["tools"]}
        created = await client.call(
            "countdown", {"start": 8, "tick_s": 0}, task={}, progress_token="p"
        )
        task_id = created["task"]["taskId"]
        assert created["task"]["status"] == "working"
        result = await client.result(task_id)
        assert result["structuredContent"] == {"counted": 8, "lanes": 4}
        assert result["_meta"] == {RELATED: {"taskId": task_id}}
        await client.tap.until(lambda: "completed" in client.statuses(task_id))
        await client.tap.until(lambda: any(
            p["progress"] == p.get("total") for p in client.notifications("notifications/progress")
        ))  # fmt: skip
        assert (await client.get(task_id))["status"] == "completed"
    progress = client.notifications("notifications/progress")
    assert {p["progressToken"] for p in progress} == {"p"}
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))


async def test_a_task_outlives_its_session_and_is_found_from_the_next(url: str) -> None:
    async with http_client(url, ANN) as first:
        task_id = await first.start("gated", {"gate": "http-later"})
    flows.gate("http-later").set()
    async with http_client(url, ANN) as second:
        result = await second.result(task_id)
    assert result["structuredContent"] == {"opened": "http-later"}


async def test_cancel_a_task_mid_phase(url: str) -> None:
    async with http_client(url, ANN) as client:
        task_id = await client.start("gated", {"gate": "http-cancel"})
        assert (await client.get(task_id))["status"] == "working"
        cancelled = await client.cancel(task_id)
        assert cancelled["status"] == "cancelled"
        flows.gate("http-cancel").set()
        assert (await client.get(task_id))["status"] == "cancelled"
        error = await client.error("tasks/result", {"taskId": task_id})
    assert error.code == types.INTERNAL_ERROR
    assert "was cancelled" in error.message


async def test_an_input_request_is_answered_through_elicitation(url: str) -> None:
    asked: list[str] = []

    async def human(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with http_client(url, ANN, elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await client.tap.until(lambda: "input_required" in client.statuses(task_id))
        result = await client.result(task_id)
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert asked == ["Your name?"]


async def test_two_principals_see_only_their_own_tasks(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with http_client(url, ANN) as ann, http_client(url, BOB) as bob:
        mine = await ann.start("gated", {"gate": "http-iso"})
        theirs = await bob.start("gated", {"gate": "http-iso-bob"})
        unknown = await bob.error("tasks/get", {"taskId": "no-such-task"})
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            error = await bob.error(method, {"taskId": mine})
            assert (error.code, error.message) == (unknown.code, f"Task not found: {mine}")
        assert [t["taskId"] for t in (await bob.list_tasks())["tasks"]] == [theirs]
        assert [t["taskId"] for t in (await ann.list_tasks())["tasks"]] == [mine]
        for tool in ("task_status", "task_result", "task_cancel", "task_attempts"):
            answer = await bob.call(tool, {"task_id": mine})
            assert answer["isError"] is True
            assert answer["content"][0]["text"] == f"Task not found: {mine}"
        assert (await ann.get(mine))["status"] == "working"  # bob's cancel changed nothing
        flows.gate("http-iso").set()
        flows.gate("http-iso-bob").set()
        assert (await ann.result(mine))["structuredContent"] == {"opened": "http-iso"}
    trail = audit_records(caplog)
    call = {"method": "tools/call", "outcome": "ok"}
    assert {
        "principal": "ann",
        "action": "create",
        "task_id": mine,
        "tool": "gated",
        **call,
    } in trail
    refused = {"principal": "bob", "task_id": mine, "outcome": "refused", "error_code": -32602}
    for method, action in (
        ("tasks/get", "read"),
        ("tasks/result", "read"),
        ("tasks/cancel", "cancel"),
    ):
        assert {**refused, "action": action, "method": method} in trail
    for tool, action in (("task_status", "read"), ("task_cancel", "cancel")):
        assert {**refused, "action": action, "tool": tool, "method": "tools/call"} in trail
    assert {"principal": "ann", "action": "read", "task_id": mine, "method": "tasks/result",
            "outcome": "ok"} in trail  # fmt: skip
    assert not any(ANN in str(record) or BOB in str(record) for record in trail)


async def test_a_wrong_or_missing_token_cannot_open_a_session(url: str) -> None:
    for token, said in ((None, "send Authorization"), ("not-a-known-token-at-all", "not valid")):
        with pytest.RaisesGroup(
            pytest.RaisesExc(MCPError, match=f"^Unauthorized: .*{said}"), flatten_subgroups=True
        ):
            async with http_client(url, token):
                pass


def _texts(result: dict[str, Any]) -> str:
    return "\n".join(part["text"] for part in result["content"])


async def test_history_tools_show_retries_and_failures(url: str) -> None:
    async with http_client(url, ANN) as client, http_client(url, BOB) as bob:
        task_id = await client.start("countdown", {"start": 4, "tick_s": 0, "fail_at": 2})
        assert (await client.result(task_id))["isError"] is True
        attempts = await client.call("task_attempts", {"task_id": task_id})
        failed_only = await client.call("task_attempts", {"task_id": task_id, "failed_only": True})
        latest = await client.call("tasks_last_failed", {})
        grouped = await client.call("tasks_last_failed", {"by_fingerprint": True})
        nothing = await bob.call("tasks_last_failed", {})
    lines = _texts(attempts).splitlines()
    assert lines[0].startswith(f"task {task_id}: failed (countdown), ")
    assert "2 failed" in lines[0]
    failing = [line for line in lines[1:] if " failed " in line]
    assert [line.split()[0] for line in failing] == ["lane_2#1", "lane_2#2"]
    assert all("RuntimeError: told to fail at 2  [fp " in line for line in failing)
    assert any(line.startswith("plan#1  completed  ") for line in lines)
    assert len(_texts(failed_only).splitlines()) == 3
    latest_lines = _texts(latest).splitlines()
    assert len(latest_lines) == 2
    assert all(f"{task_id} (countdown)" in line for line in latest_lines)
    (group,) = _texts(grouped).splitlines()
    assert group.startswith("2x  first ")
    assert "told to fail at 2" in group
    assert _texts(nothing) == "no failed attempts"
