"""Protocol 2025-11-25 through an in-process client, one test per rule of the
contract's checklist (../shared/mcp-tasks-contract.md §5.A); the rule id is in each name."""

import logging
from datetime import datetime
from typing import Any

import anyio
import pytest

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock
from tests.helpers import eventually
from tests.server import flows
from tests.server.client import TASK_META, LegacyClient, task_named
from tests.server.conftest import Connect

RELATED = "io.modelcontextprotocol/related-task"


async def test_l1_capabilities_tasks_on_2025_11_25(client: LegacyClient) -> None:
    capabilities = client.initialize_result["capabilities"]
    assert client.initialize_result["protocolVersion"] == "2025-11-25"
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


async def test_l1_no_tasks_capability_on_an_older_version(connect: Connect) -> None:
    async with connect(protocol_version="2025-06-18") as old:
        assert old.initialize_result["protocolVersion"] == "2025-06-18"
        assert "tasks" not in old.initialize_result["capabilities"]


def _parses(moment: str) -> bool:
    return datetime.fromisoformat(moment).tzinfo is not None


async def test_l3_tools_list_shows_schemas_and_task_support(connect: Connect) -> None:
    async with connect(declare_tasks=True) as client:
        tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    countdown = tools["countdown"]
    assert countdown["execution"] == {"taskSupport": "optional"}
    assert countdown["title"] == "Countdown"
    assert countdown["inputSchema"]["type"] == "object"
    assert set(countdown["inputSchema"]["properties"]) == {"start", "tick_s", "fail_at"}
    assert countdown["outputSchema"]["required"] == ["counted", "lanes"]
    assert tools["must_task"]["execution"] == {"taskSupport": "required"}
    assert "outputSchema" not in tools["must_task"]


async def test_a_client_that_declares_no_tasks_is_shown_no_output_schema(
    client: LegacyClient,
) -> None:
    """A plain host checks every non-error result against it (ADR 0040)."""
    tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    assert "outputSchema" not in tools["countdown"]
    assert tools["countdown"]["execution"] == {"taskSupport": "optional"}


async def test_l5_a_required_tool_without_task_is_32601(client: LegacyClient) -> None:
    error = await client.error("tools/call", {"name": "must_task", "arguments": {"gate": "g"}})
    assert error.code == -32601
    assert "must_task" in error.message
    assert (await client.list_tasks())["tasks"] == []  # nothing was created


async def test_l6_an_optional_tool_without_task_answers_its_result(client: LegacyClient) -> None:
    result = await client.call("countdown", {"start": 4, "tick_s": 0})
    task_id, unnamed = task_named(result)
    assert unnamed == {
        "content": [{"type": "text", "text": '{"counted":4,"lanes":4}'}],
        "isError": False,
        "structuredContent": {"counted": 4, "lanes": 4},
    }
    assert result["_meta"] == {
        RELATED: {"taskId": task_id},
        TASK_META: {"taskId": task_id, "status": "completed", "deferred": False},
    }


async def test_l7_a_task_augmented_call_answers_a_nested_working_task(
    client: LegacyClient,
) -> None:
    created = await client.call("gated", {"gate": "l7"}, task={"ttl": 60_000})
    assert set(created) == {"task"}
    task = created["task"]
    assert task["status"] == "working"
    assert isinstance(task["taskId"], str)
    assert task["taskId"]
    assert _parses(task["createdAt"])
    assert _parses(task["lastUpdatedAt"])
    assert task["ttl"] == 60_000
    assert isinstance(task["pollInterval"], int)
    assert task["pollInterval"] > 0
    assert "content" not in created


async def test_l8_a_malformed_task_param_is_32602(client: LegacyClient) -> None:
    for task in ({"ttl": "soon"}, "yes", {"ttl": 0}, {"ttl": -5}, {"ttl": True}):
        error = await client.error(
            "tools/call", {"name": "gated", "arguments": {"gate": "x"}, "task": task}
        )
        assert error.code == -32602, task
    assert (await client.list_tasks())["tasks"] == []


async def test_l9_ttl_is_honoured_capped_or_defaulted(client: LegacyClient) -> None:
    asked = await client.start("gated", {"gate": "l9"}, ttl=5_000)
    capped = await client.start("gated", {"gate": "l9"}, ttl=10**12)
    default = await client.start("gated", {"gate": "l9"})
    assert (await client.get(asked))["ttl"] == 5_000
    assert (await client.get(capped))["ttl"] == 600_000  # the configured maximum
    assert (await client.get(default))["ttl"] == 600_000  # default 1 h, capped to 10 min


async def test_l10_tasks_get_right_after_creation_finds_the_task(client: LegacyClient) -> None:
    task_id = await client.start("gated", {"gate": "l10"})
    got = await client.get(task_id)
    assert got["taskId"] == task_id
    assert got["status"] == "working"


async def test_l11_tasks_get_is_flat_and_stable_between_changes(
    client: LegacyClient, engine: Engine
) -> None:
    task_id = await client.start("gated", {"gate": "l11"})

    async def running() -> bool:  # the worker's start is a change; wait it out first
        return (await engine.manager.get(task_id)).state is TaskState.RUNNING

    await eventually(running)
    first = await client.get(task_id)
    second = await client.get(task_id)
    assert set(first) <= {
        "taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"
    }  # fmt: skip
    assert "task" not in first
    assert "_meta" not in first
    assert first["lastUpdatedAt"] == second["lastUpdatedAt"]  # a read changes nothing
    flows.gate("l11").set()
    await client.result(task_id)
    assert (await client.get(task_id))["lastUpdatedAt"] > first["lastUpdatedAt"]


async def test_l12_unknown_ids_are_32602_everywhere(client: LegacyClient) -> None:
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        error = await client.error(method, {"taskId": "no-such-task"})
        assert error.code == -32602, method
        assert error.message == "Task not found: no-such-task"
    assert (await client.error("tasks/get", {})).code == -32602  # no taskId at all


async def test_l12_an_expired_task_is_32602(client: LegacyClient, clock: FakeClock) -> None:
    task_id = await client.start("gated", {"gate": "l12"}, ttl=1_000)
    assert (await client.get(task_id))["status"] == "working"
    clock.advance(1.5)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        error = await client.error(method, {"taskId": task_id})
        assert error.message == f"Task not found: {task_id}"


async def test_l13_tasks_result_waits_until_the_task_is_terminal(client: LegacyClient) -> None:
    task_id = await client.start("gated", {"gate": "l13"})
    answers: list[dict[str, Any]] = []

    async def fetch() -> None:
        answers.append(await client.result(task_id))

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(fetch)
        # Later requests on the same connection are answered meanwhile; the result is not.
        assert (await client.get(task_id))["status"] == "working"
        assert (await client.get(task_id))["status"] == "working"
        assert answers == []
        flows.gate("l13").set()
    assert answers[0]["structuredContent"] == {"opened": "l13"}


async def test_l14_tasks_result_is_the_plain_calls_result_with_related_meta(
    client: LegacyClient,
) -> None:
    _, plain = task_named(await client.call("countdown", {"start": 3, "tick_s": 0}))
    task_id = await client.start("countdown", {"start": 3, "tick_s": 0})
    result = await client.result(task_id)
    assert result.pop("_meta") == {RELATED: {"taskId": task_id}}
    assert result == plain


async def test_l15_a_failed_workflow_is_failed_and_its_result_is_an_error(
    client: LegacyClient,
) -> None:
    task_id = await client.start("countdown", {"start": 4, "tick_s": 0, "fail_at": 2})
    result = await client.result(task_id)
    assert result["isError"] is True
    assert "told to fail at 2" in result["content"][0]["text"]
    assert result["_meta"] == {RELATED: {"taskId": task_id}}
    task = await client.get(task_id)
    assert task["status"] == "failed"
    assert "told to fail at 2" in task["statusMessage"]


async def test_l15_a_plain_call_of_a_failing_workflow_gets_the_same_error(
    client: LegacyClient,
) -> None:
    plain = await client.call("countdown", {"start": 4, "tick_s": 0, "fail_at": 2})
    task_id = await client.start("countdown", {"start": 4, "tick_s": 0, "fail_at": 2})
    via_task = await client.result(task_id)
    del via_task["_meta"]
    assert task_named(plain)[1] == via_task
    assert plain["content"][-1]["text"].endswith(": failed)")


async def test_l17_cancel_a_working_task(client: LegacyClient, engine: Engine) -> None:
    task_id = await client.start("gated", {"gate": "l17"})
    cancelled = await client.cancel(task_id)
    assert cancelled["status"] == "cancelled"
    assert cancelled["taskId"] == task_id
    assert "task" not in cancelled
    stored = await engine.manager.get(task_id)  # committed before the answer
    assert stored.state == "cancelled"
    flows.gate("l17").set()  # the work could finish now; the task stays cancelled
    assert (await client.get(task_id))["status"] == "cancelled"


async def test_l18_cancel_a_terminal_task_is_32602_and_changes_nothing(
    client: LegacyClient,
) -> None:
    task_id = await client.start("countdown", {"start": 2, "tick_s": 0})
    await client.result(task_id)
    before = await client.get(task_id)
    error = await client.error("tasks/cancel", {"taskId": task_id})
    assert error.code == -32602
    assert error.message == "Cannot cancel task: already in terminal status 'completed'"
    assert await client.get(task_id) == before


async def test_l19_the_result_of_a_cancelled_task_is_a_32603_error(client: LegacyClient) -> None:
    task_id = await client.start("gated", {"gate": "l19"})
    await client.cancel(task_id)
    error = await client.error("tasks/result", {"taskId": task_id})
    assert error.code == -32603
    assert error.data == {"taskId": task_id, "status": "cancelled"}
    assert "cancelled by the requestor" in error.message


async def test_l20_tasks_list_pages_without_gaps_or_duplicates(client: LegacyClient) -> None:
    created = {await client.start("gated", {"gate": "l20"}) for _ in range(7)}
    seen: list[str] = []
    page = await client.list_tasks()
    pages = 1
    while True:
        seen += [task["taskId"] for task in page["tasks"]]
        assert len(page["tasks"]) <= 3
        assert "_meta" not in page
        if "nextCursor" not in page:
            break
        page = await client.list_tasks(page["nextCursor"])
        pages += 1
    assert pages == 3
    assert len(seen) == len(set(seen))
    assert set(seen) == created


async def test_l20_a_bogus_cursor_is_32602(client: LegacyClient) -> None:
    for cursor in ("bogus", "", "x" * 500):
        assert (await client.error("tasks/list", {"cursor": cursor})).code == -32602


async def test_l21_progress_uses_the_original_token_after_the_create_result(
    client: LegacyClient,
) -> None:
    created = await client.call(
        "countdown", {"start": 8, "tick_s": 0}, task={}, progress_token="tok-21"
    )
    task_id = created["task"]["taskId"]
    await client.result(task_id)
    await client.tap.until(lambda: any(
        p["progress"] == p.get("total") for p in client.notifications("notifications/progress")
    ))  # fmt: skip
    progress = client.notifications("notifications/progress")
    assert {p["progressToken"] for p in progress} == {"tok-21"}
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))  # strictly increasing
    assert values[-1] == progress[-1]["total"] == 6  # every node of countdown
    assert _after_response(client, "notifications/progress")


async def test_l21_a_plain_call_reports_progress_on_its_own_request(
    client: LegacyClient,
) -> None:
    result = await client.call("countdown", {"start": 8, "tick_s": 0}, progress_token="plain")
    assert result["isError"] is False
    progress = client.notifications("notifications/progress")
    assert progress
    assert {p["progressToken"] for p in progress} == {"plain"}
    assert [p["progress"] for p in progress] == sorted({p["progress"] for p in progress})


async def test_l22_status_notifications_carry_the_flat_task_after_the_response(
    client: LegacyClient,
) -> None:
    task_id = await client.start("countdown", {"start": 2, "tick_s": 0})
    await client.tap.until(lambda: "completed" in client.statuses(task_id))
    last = client.notifications("notifications/tasks/status")[-1]
    assert last == await client.get(task_id)
    assert "_meta" not in last
    assert _after_response(client, "notifications/tasks/status")


def _after_response(client: LegacyClient, method: str) -> bool:
    """True when every *method* notification came after the CreateTaskResult."""
    messages = client.tap.messages
    answered = next(i for i, m in enumerate(messages) if "task" in m.get("result", {}))
    return all(i > answered for i, m in enumerate(messages) if m.get("method") == method)


async def test_l26_tasks_update_is_32601_on_2025_11_25(client: LegacyClient) -> None:
    error = await client.error("tasks/update", {"taskId": "x", "inputResponses": {}})
    assert error.code == -32601


async def test_l28_task_ids_are_long_random_strings(client: LegacyClient) -> None:
    first = await client.start("gated", {"gate": "l28"})
    second = await client.start("gated", {"gate": "l28"})
    assert first != second
    assert min(len(first), len(second)) >= 22  # >= 128 bits in url-safe base64


async def test_l29_without_the_capability_task_is_ignored_and_the_call_runs(
    connect: Connect,
) -> None:
    async with connect(protocol_version="2025-06-18") as old:
        result = await old.call("countdown", {"start": 2, "tick_s": 0}, task={"ttl": 1000})
        assert result["structuredContent"] == {"counted": 2, "lanes": 4}
        assert (await old.error("tasks/get", {"taskId": "x"})).code == -32601


async def test_an_unknown_tool_is_32602(client: LegacyClient) -> None:
    tasks: tuple[dict[str, Any] | None, ...] = (None, {})
    for task in tasks:
        params: dict[str, Any] = {"name": "nope", "arguments": {}}
        if task is not None:
            params["task"] = task
        error = await client.error("tools/call", params)
        assert error.code == -32602
        assert error.message == "Unknown tool: nope"


async def test_bad_arguments_are_a_tool_error_or_32602_for_a_task(client: LegacyClient) -> None:
    plain = await client.call("countdown", {"start": "many"})
    assert plain["isError"] is True
    assert "start" in plain["content"][0]["text"]
    error = await client.error(
        "tools/call", {"name": "countdown", "arguments": {"start": 0}, "task": {}}
    )
    assert error.code == -32602
    assert "start" in error.message
    assert (await client.list_tasks())["tasks"] == []  # neither call created a task


async def test_a_plain_call_abandoned_by_its_caller_keeps_its_task(
    client: LegacyClient, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """ADR 0018: hosts send notifications/cancelled on their own timeouts; the work goes on."""
    caplog.set_level(logging.INFO, logger="taskloom.server.plain")

    async def running() -> bool:
        page = await engine.manager.list(states=[TaskState.RUNNING])
        return len(page.tasks) == 1

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(client.call, "gated", {"gate": "gone"})
        await eventually(running)
        task_group.cancel_scope.cancel()  # the client sends notifications/cancelled
    (task,) = (await engine.manager.list()).tasks

    async def left() -> bool:  # the handler has ended: whatever it did on leaving is done
        return f"the caller left the plain call of task {task.id}" in caplog.text

    await eventually(left)
    assert (await engine.manager.get(task.id)).state is TaskState.RUNNING
    flows.gate("gone").set()
    with anyio.fail_after(10):
        finished = await engine.manager.wait_until_terminal(task.id)
    assert finished.state is TaskState.COMPLETED


async def test_a_task_outlives_its_connection(connect: Connect) -> None:
    async with connect() as first:
        task_id = await first.start("gated", {"gate": "durable"})
    flows.gate("durable").set()
    async with connect() as second:
        result = await second.result(task_id)
        assert result["structuredContent"] == {"opened": "durable"}


async def test_l27_a_principal_sees_only_its_own_tasks(connect: Connect) -> None:
    async with connect(owner="alice") as alice, connect(owner="bob") as bob:
        task_id = await alice.start("gated", {"gate": "l27"})
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            error = await bob.error(method, {"taskId": task_id})
            assert error.code == -32602
            assert error.message == f"Task not found: {task_id}"  # as for an unknown id
        assert (await bob.list_tasks())["tasks"] == []
        assert [t["taskId"] for t in (await alice.list_tasks())["tasks"]] == [task_id]
        assert (await alice.get(task_id))["status"] == "working"
