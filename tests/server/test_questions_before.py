"""Questions asked before a task exists (ADR 0019): MRTR rounds of ``tools/call`` on
2026-07-28, the task asking them first on 2025-11-25; and a ``forbidden`` workflow,
which answers its result on the call and never becomes a task."""

import base64
from typing import Any

import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from pydantic import BaseModel

from taskloom.bootstrap import Engine
from taskloom.server.mrtr import STATE_PREFIX
from tests.server.client import LegacyClient, task_named
from tests.server.conftest import Connect
from tests.server.flows import Confirm, Name
from tests.server.modern_client import ModernClient


def _untitled(model: type[BaseModel]) -> dict[str, Any]:
    """The model's schema as an elicitation carries it (the SDK drops its title)."""
    schema = model.model_json_schema()
    del schema["title"]
    return schema


FIRST_ROUND = {
    "user_name": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Your name?",
            "requestedSchema": _untitled(Name),
        },
    },
    "go": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Go ahead?",
            "requestedSchema": _untitled(Confirm),
        },
    },
}


def _accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


async def _round(
    modern: ModernClient,
    responses: dict[str, Any] | None = None,
    state: str | None = None,
    *,
    declare: bool = True,
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "asks_first", "arguments": {}}
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return await modern.request("tools/call", params, declare=declare)


async def _task_count(engine: Engine) -> int:
    return len((await engine.manager.list(limit=100)).tasks)


async def test_round_one_asks_every_question_and_creates_no_task(
    modern: ModernClient, engine: Engine
) -> None:
    first = await _round(modern)
    assert first["resultType"] == "input_required"
    assert first["inputRequests"] == FIRST_ROUND
    assert "requestState" not in first
    assert "taskId" not in first
    assert await _task_count(engine) == 0


async def test_round_two_with_every_answer_creates_the_task_that_reads_them(
    modern: ModernClient, engine: Engine
) -> None:
    created = await _round(
        modern, {"user_name": _accept(name="Alice"), "go": _accept(confirm=True)}
    )
    assert created["resultType"] == "task"
    assert not {"requestState", "inputRequests", "result"} & set(created)
    task = await engine.manager.get(created["taskId"])
    assert task.input_responses == {"user_name": {"name": "Alice"}, "go": {"confirm": True}}
    done = await modern.until(created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Alice!"
    assert "inputRequests" not in done


async def test_a_partial_round_asks_the_rest_and_carries_the_answers_in_request_state(
    modern: ModernClient, engine: Engine
) -> None:
    second = await _round(
        modern, {"user_name": _accept(name="Bo"), "unasked": _accept(name="ignored")}
    )
    assert second["resultType"] == "input_required"
    assert set(second["inputRequests"]) == {"go"}
    state = second["requestState"]
    assert state.startswith(STATE_PREFIX)
    assert await _task_count(engine) == 0
    created = await _round(modern, {"go": _accept(confirm=False)}, state)
    done = await modern.until(created["taskId"])
    assert done["result"]["content"][0]["text"] == "Hello, Bo?"


@pytest.mark.parametrize(
    ("responses", "state", "message"),
    [
        ({"user_name": _accept(nom="Al"), "go": _accept(confirm=True)}, None, "user_name"),
        ({"go": _accept(confirm=True)}, "forged", "requestState forged was not issued"),
        ({"go": _accept(confirm=True)}, STATE_PREFIX + "!!!", "was not issued"),
    ],
)
async def test_a_bad_answer_or_request_state_is_32602_and_creates_nothing(
    modern: ModernClient,
    engine: Engine,
    responses: dict[str, Any],
    state: str | None,
    message: str,
) -> None:
    params: dict[str, Any] = {"name": "asks_first", "arguments": {}, "inputResponses": responses}
    if state is not None:
        params["requestState"] = state
    error = await modern.error("tools/call", params)
    assert error.code == -32602
    assert message in error.message
    assert await _task_count(engine) == 0


async def test_request_state_of_another_tool_is_refused(
    modern: ModernClient, engine: Engine
) -> None:
    state = (await _round(modern, {"user_name": _accept(name="Bo")}))["requestState"]
    tampered = state.replace(STATE_PREFIX, STATE_PREFIX + "x")
    for forged in (tampered, _foreign_state()):
        error = await modern.error(
            "tools/call",
            {
                "name": "asks_first",
                "arguments": {},
                "inputResponses": {"go": _accept(confirm=True)},
                "requestState": forged,
            },
        )
        assert (error.code, "was not issued" in error.message) == (-32602, True)
    assert await _task_count(engine) == 0


def _foreign_state() -> str:
    body = b'{"tool":"ask","answers":{"user_name":{"name":"Eve"}}}'
    return STATE_PREFIX + base64.urlsafe_b64encode(body).decode()


async def test_a_declined_question_ends_the_call_with_a_tool_error_and_no_task(
    modern: ModernClient, engine: Engine
) -> None:
    answer = await _round(modern, {"user_name": {"action": "decline"}})
    assert answer["resultType"] == "complete"
    assert answer["isError"] is True
    assert answer["content"][0]["text"] == "the requestor declined to answer: Your name?"
    assert await _task_count(engine) == 0


async def test_without_the_extension_the_answers_make_a_plain_call(modern: ModernClient) -> None:
    first = await _round(modern, declare=False)
    assert set(first["inputRequests"]) == {"user_name", "go"}
    answers = {"user_name": _accept(name="Cy"), "go": _accept(confirm=True)}
    result = await _round(modern, answers, declare=False)
    assert result["resultType"] == "complete"
    _, unnamed = task_named(result)  # a plain call names its task (ADR 0018)
    assert unnamed["content"] == [{"type": "text", "text": "Hello, Cy!"}]


async def test_arguments_that_do_not_fit_are_refused_before_anything_is_asked(
    modern: ModernClient,
) -> None:
    error = await modern.error("tools/call", {"name": "asks_first", "arguments": {"question": 5}})
    assert error.code == -32602


class _Human:
    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content=self.answers.pop(0))


async def test_on_2025_11_25_the_task_asks_its_questions_first(connect: Connect) -> None:
    human = _Human({"name": "Luca"}, {"confirm": True})
    async with connect(elicitation_callback=human) as client:
        task_id = await client.start("asks_first", {})
        await client.tap.until(lambda: "input_required" in client.statuses(task_id))
        waiting = await client.get(task_id)
        assert waiting["status"] == "input_required"
        result = await client.result(task_id)
    assert human.asked == ["Your name?", "Go ahead?"]
    assert result["content"] == [{"type": "text", "text": "Hello, Luca!"}]


async def test_a_forbidden_workflow_answers_on_the_call_on_every_generation(
    modern: ModernClient, client: LegacyClient, engine: Engine
) -> None:
    for declare in (True, False):
        answer = await modern.call("hello_now", {"name": "World"}, declare=declare)
        assert answer["resultType"] == "complete"
        _, unnamed = task_named(answer)  # the stored run it was, as every plain call
        assert unnamed["content"] == [{"type": "text", "text": "Hello, World!"}]
        assert "taskId" not in answer
    legacy_task_param = await modern.request(
        "tools/call", {"name": "hello_now", "arguments": {"name": "X"}, "task": {"ttl": 1000}}
    )
    assert legacy_task_param["content"][0]["text"] == "Hello, X!"
    plain = await client.call("hello_now", {"name": "Ann"})
    assert task_named(plain)[1]["content"] == [{"type": "text", "text": "Hello, Ann!"}]
    error = await client.error(
        "tools/call", {"name": "hello_now", "arguments": {"name": "A"}, "task": {}}
    )
    assert error.code == -32601
    tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    assert tools["hello_now"]["execution"] == {"taskSupport": "forbidden"}
