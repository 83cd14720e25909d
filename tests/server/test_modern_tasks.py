"""Protocol 2026-07-28 with the tasks extension through an in-process client, one test
per rule of the contract's checklist (../shared/mcp-tasks-contract.md §5.B, the rule id
in each name); the HTTP-only rules (M31, M32) belong to the HTTP transport."""

from datetime import datetime
from typing import Any

import anyio

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock
from tests.helpers import eventually
from tests.server import flows
from tests.server.client import task_named
from tests.server.conftest import Connect, ConnectModern
from tests.server.modern_client import EXT, ModernClient

REQUIRED: dict[str, Any] = {"requiredCapabilities": {"extensions": {EXT: {}}}}
TASK_FIELDS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs"}
CREATE_FIELDS = {"resultType", *TASK_FIELDS, "pollIntervalMs", "_meta"}
FORBIDDEN_IN_ACK = {"taskId", "status", "result", "error", "inputRequests"}


def _iso(moment: str) -> bool:
    return datetime.fromisoformat(moment).tzinfo is not None


async def _engine_state(engine: Engine, task_id: str) -> TaskState:
    return (await engine.manager.get(task_id)).state


async def test_m1_the_extension_is_advertised_in_server_discover(modern: ModernClient) -> None:
    capabilities = (await modern.request("server/discover", {}))["capabilities"]
    assert capabilities["extensions"][EXT] == {}
    assert "tasks" not in capabilities


async def test_m2_tasks_methods_without_the_extension_are_32021_before_any_lookup(
    modern: ModernClient,
) -> None:
    task_id = await modern.start("gated", {"gate": "m2"})
    requests: list[tuple[str, dict[str, Any]]] = [
        ("tasks/get", {"taskId": task_id}),
        ("tasks/get", {"taskId": "gate-test"}),
        ("tasks/update", {"taskId": "gate-test", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "gate-test"}),
        ("tasks/cancel", {"taskId": task_id}),
    ]
    for method, params in requests:
        error = await modern.error(method, params, declare=False)
        assert (error.code, error.data) == (-32021, REQUIRED), method
    assert (await modern.get(task_id))["status"] == "working"  # the cancel was refused


async def test_m3_an_optional_tool_without_the_extension_answers_synchronously(
    modern: ModernClient, engine: Engine
) -> None:
    result = await modern.call("countdown", {"start": 3, "tick_s": 0}, declare=False)
    assert result["resultType"] == "complete"
    assert result["content"]
    assert result["structuredContent"] == {"counted": 3, "lanes": 4}
    assert "taskId" not in result
    assert "task" not in result


async def test_m4_the_extension_in_this_requests_meta_creates_a_task(
    connect_modern: ConnectModern,
) -> None:
    async with connect_modern(declare=False) as client:  # the connection never declares it
        assert (await client.call("countdown", {"start": 2, "tick_s": 0}))["resultType"] == (
            "complete"
        )
        created = await client.call("countdown", {"start": 2, "tick_s": 0}, declare=True)
        assert created["resultType"] == "task"
        finished = await client.request("tasks/get", {"taskId": created["taskId"]}, declare=True)
        assert finished["taskId"] == created["taskId"]


async def test_m5_a_required_tool_without_the_extension_is_32021(
    modern: ModernClient, engine: Engine
) -> None:
    error = await modern.error(
        "tools/call", {"name": "must_task", "arguments": {"gate": "g"}}, declare=False
    )
    assert (error.code, error.data) == (-32021, REQUIRED)
    assert "must_task" in error.message
    assert (await engine.manager.list()).tasks == ()  # nothing was created


async def test_m6_a_sync_only_tool_answers_complete(modern: ModernClient) -> None:
    result = await modern.call("task_list", {})  # the fallback tools never become tasks
    assert result["resultType"] == "complete"
    assert result["content"]
    assert "taskId" not in result


async def test_m7_m8_the_create_result_is_flat_with_2026_field_names(
    modern: ModernClient,
) -> None:
    created = await modern.call("gated", {"gate": "m7"})
    assert created["resultType"] == "task"
    assert set(created) <= CREATE_FIELDS
    assert created["status"] == "working"
    assert _iso(created["createdAt"])
    assert _iso(created["lastUpdatedAt"])
    assert created["ttlMs"] == 600_000  # the configured cap (default 1 h, capped to 10 min)
    assert isinstance(created["pollIntervalMs"], int)
    assert created["pollIntervalMs"] > 0
    for absent in ("task", "ttl", "pollInterval", "result", "error", "inputRequests"):
        assert absent not in created
    assert "requestState" not in created  # M28


async def test_m9_tasks_get_right_after_creation_finds_the_task(modern: ModernClient) -> None:
    task_id = await modern.start("gated", {"gate": "m9"})
    assert (await modern.get(task_id))["taskId"] == task_id


async def test_m10_a_working_task_has_no_result_or_error(modern: ModernClient) -> None:
    got = await modern.get(await modern.start("gated", {"gate": "m10"}))
    assert got["resultType"] == "complete"
    assert got["status"] == "working"
    assert not {"result", "error", "inputRequests", "requestState"} & set(got)  # M28


async def test_m11_a_completed_task_inlines_the_full_call_tool_result(
    modern: ModernClient,
) -> None:
    task_id = await modern.start("countdown", {"start": 4, "tick_s": 0})
    done = await modern.until(task_id)
    assert done["status"] == "completed"
    assert done["result"] == {
        "content": [{"type": "text", "text": '{"counted":4,"lanes":4}'}],
        "isError": False,
        "structuredContent": {"counted": 4, "lanes": 4},
    }  # M29: no related-task _meta in it
    assert "error" not in done
    plain = await modern.call("countdown", {"start": 4, "tick_s": 0}, declare=False)
    assert task_named(plain)[1] == done["result"]


async def test_m12_a_tool_error_is_completed_with_is_error(modern: ModernClient) -> None:
    done = await modern.until(await modern.start("fails"))
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert "told to fail" in done["result"]["content"][0]["text"]
    assert "error" not in done


async def test_m13_a_server_fault_is_failed_with_a_json_rpc_error(modern: ModernClient) -> None:
    task_id = await modern.start("broken")
    done = await modern.until(task_id)
    assert done["status"] == "failed"
    assert "result" not in done
    error = done["error"]
    assert error["code"] == -32603
    assert "result is invalid" in error["message"]
    assert error["data"] == {"taskId": task_id, "status": "failed", "reason": "invalid_output"}
    assert done["statusMessage"]


async def test_m14_cancel_is_an_empty_ack_and_the_task_ends_cancelled(
    modern: ModernClient, engine: Engine
) -> None:
    task_id = await modern.start("gated", {"gate": "m14"})
    ack = await modern.cancel(task_id)
    assert ack["resultType"] == "complete"
    assert not FORBIDDEN_IN_ACK & set(ack)
    assert await _engine_state(engine, task_id) is TaskState.CANCELLED  # before the ack
    assert (await modern.get(task_id))["status"] == "cancelled"


async def test_m15_cancelling_a_terminal_task_acks_and_changes_nothing(
    modern: ModernClient,
) -> None:
    done = await modern.until(await modern.start("countdown", {"start": 2, "tick_s": 0}))
    ack = await modern.cancel(done["taskId"])
    assert ack["resultType"] == "complete"
    assert not FORBIDDEN_IN_ACK & set(ack)
    assert await modern.get(done["taskId"]) == done


async def test_m16_m17_tasks_result_and_tasks_list_are_32601(modern: ModernClient) -> None:
    task_id = await modern.start("gated", {"gate": "m16"})
    assert (await modern.error("tasks/result", {"taskId": task_id})).code == -32601
    assert (await modern.error("tasks/list", {})).code == -32601


async def test_m18_m19_the_server_decides_and_ignores_the_legacy_task_param(
    modern: ModernClient, engine: Engine
) -> None:
    created = await modern.call("countdown", {"start": 2, "tick_s": 0})  # no hint at all
    assert created["resultType"] == "task"
    legacy_hint = {"name": "task_list", "arguments": {}, "task": {"ttl": 5, "pollInterval": 1}}
    plain = await modern.request("tools/call", legacy_hint)
    assert plain["resultType"] == "complete"
    assert "taskId" not in plain
    also_plain = await modern.request(
        "tools/call", {"name": "countdown", "arguments": {"start": 1, "tick_s": 0}, "task": {}},
        declare=False,
    )  # fmt: skip
    assert also_plain["resultType"] == "complete"


async def test_m20_a_fast_call_still_becomes_a_task_when_declared(modern: ModernClient) -> None:
    created = await modern.call("countdown", {"start": 1, "tick_s": 0})
    assert created["resultType"] == "task"  # the policy (ADR 0010): no sync shortcut


async def test_m21_every_non_task_response_has_result_type_complete(
    modern: ModernClient,
) -> None:
    task_id = await modern.start("ask", {})
    await modern.until(task_id, {"input_required"})
    answers = [
        await modern.call("task_list", {}),
        await modern.get(task_id),
        await modern.update(task_id, {"unknown-key": {"ignored": True}}),
        await modern.cancel(task_id),
    ]
    assert [answer["resultType"] for answer in answers] == ["complete"] * 4


async def test_m22_unknown_ids_are_32602_everywhere(modern: ModernClient) -> None:
    requests: list[tuple[str, dict[str, Any]]] = [
        ("tasks/get", {"taskId": "nope"}),
        ("tasks/update", {"taskId": "nope", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "nope"}),
    ]
    for method, params in requests:
        error = await modern.error(method, params)
        assert (error.code, error.message) == (-32602, "Task not found: nope"), method


async def test_m23_m24_input_is_asked_in_tasks_get_and_answered_by_tasks_update(
    modern: ModernClient,
) -> None:
    task_id = await modern.start("ask", {"question": "Who?"})
    waiting = await modern.until(task_id, {"input_required"})
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Who?"
    assert request["params"]["requestedSchema"]["required"] == ["name"]
    ack = await modern.update(task_id, {key: {"action": "accept", "content": {"name": "Ada"}}})
    assert ack["resultType"] == "complete"
    assert not FORBIDDEN_IN_ACK & set(ack)
    done = await modern.until(task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"


async def _two_questions(modern: ModernClient) -> tuple[str, dict[str, Any]]:
    task_id = await modern.start("ask_two")
    latest: dict[str, Any] = {}

    async def both_asked() -> bool:
        nonlocal latest
        latest = await modern.get(task_id)
        return len(latest.get("inputRequests", {})) == 2

    await eventually(both_asked)
    return task_id, latest["inputRequests"]


async def test_m25_a_partial_update_is_applied_before_the_ack(modern: ModernClient) -> None:
    task_id, requests = await _two_questions(modern)
    name_key = next(key for key, r in requests.items() if r["params"]["message"] == "Your name?")
    sure_key = next(key for key in requests if key != name_key)
    await modern.update(task_id, {name_key: {"action": "accept", "content": {"name": "Bo"}}})
    now = await modern.get(task_id)  # immediately: the answered key is gone
    assert now["status"] == "input_required"
    assert list(now["inputRequests"]) == [sure_key]
    await modern.update(task_id, {sure_key: {"action": "accept", "content": {"confirm": True}}})
    done = await modern.until(task_id)
    assert done["result"]["content"][0]["text"] == "Bo is sure"


async def test_m26_a_repeated_or_stale_answer_is_ignored(
    modern: ModernClient, engine: Engine
) -> None:
    task_id, requests = await _two_questions(modern)
    name_key = next(key for key, r in requests.items() if r["params"]["message"] == "Your name?")
    await modern.update(task_id, {name_key: {"action": "accept", "content": {"name": "Cy"}}})
    again = {name_key: {"action": "accept", "content": {"name": "Someone else"}}}
    assert (await modern.update(task_id, again))["resultType"] == "complete"
    after = await engine.manager.get(task_id)  # its node may have moved on meanwhile
    assert after.input_responses == {name_key: {"name": "Cy"}}  # not overwritten
    assert after.state is TaskState.INPUT_REQUIRED  # the other question still holds it
    assert name_key not in after.input_requests
    assert len(set(requests)) == 2  # distinct keys within the task


async def test_m26_an_answer_that_does_not_fit_keeps_the_task_waiting(
    modern: ModernClient, engine: Engine
) -> None:
    task_id = await modern.start("ask", {})
    [key] = (await modern.until(task_id, {"input_required"}))["inputRequests"]
    with anyio.fail_after(10), engine.manager.subscribe([task_id]) as changes:
        before = await engine.manager.get(task_id)
        while not before.parked:  # the question is written, then the run is handed back
            before = await changes.receive()
    for bad in ({"action": "accept", "content": {"nom": "Ada"}}, {"action": "maybe"}, "yes"):
        error = await modern.error(
            "tasks/update", {"taskId": task_id, "inputResponses": {key: bad}}
        )
        assert error.code == -32602
        assert key in error.message
    assert await engine.manager.get(task_id) == before
    assert list((await modern.get(task_id))["inputRequests"]) == [key]


async def test_a_declined_question_fails_and_a_dismissed_one_cancels(
    modern: ModernClient,
) -> None:
    declined = await modern.start("ask", {})
    [key] = (await modern.until(declined, {"input_required"}))["inputRequests"]
    await modern.update(declined, {key: {"action": "decline"}})
    done = await modern.get(declined)
    assert done["status"] == "completed"  # a tool error on 2026-07-28 (failed on 2025-11-25)
    assert done["result"]["isError"] is True
    assert "declined" in done["result"]["content"][0]["text"]
    dismissed = await modern.start("ask", {})
    [key] = (await modern.until(dismissed, {"input_required"}))["inputRequests"]
    await modern.update(dismissed, {key: {"action": "cancel"}})
    assert (await modern.get(dismissed))["status"] == "cancelled"


async def test_m30_a_finished_task_stays_readable_until_its_ttl(
    modern: ModernClient, clock: FakeClock
) -> None:
    done = await modern.until(await modern.start("countdown", {"start": 1, "tick_s": 0}))
    clock.advance(done["ttlMs"] / 1000 - 1)
    assert (await modern.get(done["taskId"]))["status"] == "completed"
    clock.advance(2)
    assert (await modern.error("tasks/get", {"taskId": done["taskId"]})).code == -32602


async def test_m33_another_connection_of_the_same_owner_can_get_and_cancel(
    connect_modern: ConnectModern,
) -> None:
    async with connect_modern(owner="alice") as first:
        task_id = await first.start("gated", {"gate": "m33"})
    async with connect_modern(owner="alice") as second:
        assert (await second.get(task_id))["status"] == "working"
        await second.cancel(task_id)
        assert (await second.get(task_id))["status"] == "cancelled"


async def test_m33_another_owner_sees_not_found(connect_modern: ConnectModern) -> None:
    async with connect_modern(owner="alice") as alice:
        task_id = await alice.start("gated", {"gate": "m33b"})
        async with connect_modern(owner="bob") as bob:
            requests: list[tuple[str, dict[str, Any]]] = [
                ("tasks/get", {"taskId": task_id}),
                ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
                ("tasks/cancel", {"taskId": task_id}),
            ]
            for method, params in requests:
                error = await bob.error(method, params)
                assert (error.code, error.message) == (-32602, f"Task not found: {task_id}")
        assert (await alice.get(task_id))["status"] == "working"


async def test_e9_one_stored_outcome_read_by_each_generation(
    client: Any, connect_modern: ConnectModern
) -> None:
    failed = await client.start("fails", {})
    faulty = await client.start("broken", {})
    async with connect_modern() as modern:
        assert (await modern.until(failed))["status"] == "completed"  # isError: completed
        assert (await modern.until(faulty))["status"] == "failed"  # a server fault
    assert (await client.get(failed))["status"] == "failed"  # the same task on 2025-11-25
    assert (await client.result(failed))["isError"] is True
    legacy_fault = await client.error("tasks/result", {"taskId": faulty})
    assert legacy_fault.code == -32603  # L16: the JSON-RPC error itself
    assert legacy_fault.data == {"taskId": faulty, "status": "failed", "reason": "invalid_output"}


async def test_a_legacy_connection_cannot_use_the_extension(connect: Connect) -> None:
    async with connect() as legacy:
        error = await legacy.error("tasks/update", {"taskId": "x", "inputResponses": {}})
        assert error.code == -32601
        created = await legacy.call("countdown", {"start": 1, "tick_s": 0})
        assert "content" in created  # no task without params.task, whatever the _meta says
    flows.gate("unused").set()


async def test_output_schemas_only_for_a_request_that_declares_the_extension(
    connect_modern: ConnectModern,
) -> None:
    """A plain host's SDK checks every result against them, and a deferral cannot pass
    (ADR 0040)."""
    async with connect_modern() as client:
        declared = await client.request("tools/list")
        plain = await client.request("tools/list", declare=False)
    schemas = {tool["name"]: tool.get("outputSchema") for tool in declared["tools"]}
    assert schemas["countdown"] is not None
    assert schemas["countdown"]["required"] == ["counted", "lanes"]
    assert all("outputSchema" not in tool for tool in plain["tools"])
