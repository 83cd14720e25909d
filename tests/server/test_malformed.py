"""Malformed requests get a spec error code, never a crash, and change no stored task."""

from typing import Any

import anyio
import pytest

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from tests.helpers import eventually
from tests.server.client import LegacyClient
from tests.server.modern_client import ModernClient

SPEC_CODES = {-32600, -32601, -32602, -32603}

MALFORMED: list[tuple[str, Any]] = [
    ("tasks/get", None),
    ("tasks/get", {"taskId": 5}),
    ("tasks/get", {"taskId": None}),
    ("tasks/get", {"taskId": ["a"]}),
    ("tasks/get", {"taskId": ""}),
    ("tasks/get", {"taskId": "x" * 100_000}),
    ("tasks/get", {"taskId": "\x00\u202e"}),
    ("tasks/result", {"taskId": {"nested": True}}),
    ("tasks/result", {"taskId": "missing"}),
    ("tasks/cancel", {}),
    ("tasks/cancel", {"taskId": 1.5}),
    ("tasks/list", {"cursor": 7}),
    ("tasks/list", {"cursor": "\ud800"}),
    ("tasks/list", {"cursor": "eyJ4IjogMX0="}),
    ("tasks/update", {"taskId": "x"}),
    ("tasks/whatever", {}),
    ("tools/call", None),
    ("tools/call", {}),
    ("tools/call", {"name": 5}),
    ("tools/call", {"name": "countdown", "arguments": "start=3"}),
    ("tools/call", {"name": "countdown", "arguments": {"start": 3}, "task": []}),
    ("tools/call", {"name": "countdown", "arguments": {"start": 3}, "task": {"ttl": 1e300}}),
    ("tools/call", {"name": "countdown", "arguments": {"start": 3}, "task": {"ttl": True}}),
    ("tools/call", {"name": "countdown", "arguments": {"start": -1}, "task": {}}),
    ("tools/call", {"name": "countdown", "arguments": {"nope": 1, "start": 10**30}, "task": {}}),
    ("tools/call", {"name": "", "arguments": {}}),
    ("tools/call", {"name": "task_status", "arguments": {"task_id": 5}, "task": {}}),
]


@pytest.mark.parametrize(("method", "params"), MALFORMED)
async def test_a_malformed_request_is_a_spec_error_and_changes_nothing(
    client: LegacyClient, engine: Engine, method: str, params: Any
) -> None:
    task_id = await client.start("gated", {"gate": "steady"})

    async def running() -> bool:  # the worker's own change lands first
        return (await engine.manager.get(task_id)).state is TaskState.RUNNING

    await eventually(running)
    before = await engine.manager.get(task_id)
    error = await client.error(method, params)
    assert error.code in SPEC_CODES, (method, params, error)
    assert "Traceback" not in error.message
    assert await engine.manager.get(task_id) == before
    assert [task.id for task in (await engine.manager.list()).tasks] == [task_id]
    assert (await client.get(task_id))["status"] == "working"  # still serving


MODERN_MALFORMED: list[tuple[str, Any]] = [
    ("tasks/get", {"taskId": 5}),
    ("tasks/get", {}),
    ("tasks/get", {"taskId": "x" * 100_000}),
    ("tasks/update", {"taskId": "x"}),
    ("tasks/update", {"taskId": "x", "inputResponses": []}),
    ("tasks/update", {"taskId": "x", "inputResponses": None}),
    ("tasks/update", {"taskId": ["x"], "inputResponses": {}}),
    ("tasks/cancel", {"taskId": {"id": "x"}}),
    ("tasks/cancel", {"taskId": "\x00\u202e"}),
    ("tasks/result", {"taskId": "x"}),
    ("tasks/list", {}),
    ("tasks/whatever", {}),
    ("tools/call", {"name": "countdown", "arguments": {"start": -1}}),
    ("tools/call", {"name": "countdown", "arguments": "start=3"}),
    ("tools/call", {"name": 5}),
    ("tools/call", {"name": "nope", "arguments": {}}),
]


@pytest.mark.parametrize(("method", "params"), MODERN_MALFORMED)
async def test_a_malformed_modern_request_is_a_spec_error_and_changes_nothing(
    modern: ModernClient, engine: Engine, method: str, params: Any
) -> None:
    task_id = await modern.start("gated", {"gate": "steady"})

    async def running() -> bool:
        return (await engine.manager.get(task_id)).state is TaskState.RUNNING

    await eventually(running)
    before = await engine.manager.get(task_id)
    error = await modern.error(method, params)
    assert error.code in SPEC_CODES, (method, params, error)
    assert "Traceback" not in error.message
    assert await engine.manager.get(task_id) == before
    assert [task.id for task in (await engine.manager.list()).tasks] == [task_id]
    assert (await modern.get(task_id))["status"] == "working"


async def test_a_bad_answer_to_a_pending_question_is_32602_and_changes_nothing(
    modern: ModernClient, engine: Engine
) -> None:
    task_id = await modern.start("ask", {})
    [key] = (await modern.until(task_id, {"input_required"}))["inputRequests"]
    with anyio.fail_after(10), engine.manager.subscribe([task_id]) as changes:
        before = await engine.manager.get(task_id)
        while not before.parked:  # the question is written, then the run is handed back
            before = await changes.receive()
    responses: list[Any] = [None, [], {"action": "accept", "content": "Ada"}, {"content": {}}]
    for response in responses:
        error = await modern.error(
            "tasks/update", {"taskId": task_id, "inputResponses": {key: response}}
        )
        assert error.code == -32602, response
    assert await engine.manager.get(task_id) == before


async def test_a_method_of_the_other_generation_is_32601_however_malformed_its_params(
    client: LegacyClient, modern: ModernClient
) -> None:
    # Found by tests/server/test_fuzz.py: the SDK validated the params before the
    # handler's version check ran, so bad params hid a removed method behind -32602.
    assert (await modern.error("tasks/list", {"cursor": 7})).code == -32601
    assert (await modern.error("tasks/result", {"taskId": 5})).code == -32601
    assert (await modern.error("tasks/result", {})).code == -32601
    bad_update = {"taskId": "", "inputResponses": None}
    assert (await client.error("tasks/update", bad_update)).code == -32601


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tasks/get", {"taskId": "line one\nline two"}),
        ("tasks/cancel", {"taskId": "x" * 70_000}),
        ("tasks/result", {"taskId": "\x1b[31m\u202e"}),
        ("tools/call", {"name": "no\ntool", "arguments": {}}),
    ],
)
async def test_an_echoed_value_keeps_the_error_one_short_line(
    client: LegacyClient, method: str, params: dict[str, Any]
) -> None:
    # Found by tests/server/test_fuzz.py: the id (or tool name) was repeated verbatim.
    error = await client.error(method, params)
    assert error.code == -32602
    assert error.message.isprintable()  # no newline, escape or bidi control
    assert len(error.message) < 200


async def test_a_plain_unknown_id_is_still_repeated_as_sent(client: LegacyClient) -> None:
    assert (await client.error("tasks/get", {"taskId": "no-such-task"})).message == (
        "Task not found: no-such-task"
    )
