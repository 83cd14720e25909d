"""Plain calls (a host without task support) never lose work and never outlive the host
(ADR 0018): the deferred answer, progress keepalives, questions on the call itself, and
the fallback tools an agent follows it with. One test per rule, in-process."""

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.shared.memory import create_client_server_memory_streams

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.server import ServerSettings, TaskServer
from taskloom.server.questions import MAX_ASKS
from tests.server import flows
from tests.server.client import TASK_META, LegacyClient, open_client, task_named
from tests.server.modern_client import ModernClient, open_modern_client

RELATED = "io.modelcontextprotocol/related-task"
Serve = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture
def serve(engine: Engine) -> Serve:
    """``async with serve(settings, ...) as client``: a client of a server with *settings*
    (``modern=True``: a 2026-07-28 client that does not declare the tasks extension)."""

    @asynccontextmanager
    async def connected(
        settings: ServerSettings,
        *,
        modern: bool = False,
        protocol_version: str | None = None,
        elicitation_callback: ElicitationFnT | None = None,
    ) -> AsyncIterator[Any]:
        server = TaskServer(engine.manager, engine.workflows, settings)
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as task_group,
        ):
            task_group.start_soon(lambda: server.serve(*server_streams))
            if modern:
                async with open_modern_client(*client_streams, declare=False) as client:
                    yield client
            else:
                async with open_client(
                    *client_streams, protocol_version, elicitation_callback=elicitation_callback
                ) as client:
                    yield client
            task_group.cancel_scope.cancel()

    return connected


def _settings(**changes: Any) -> ServerSettings:
    return ServerSettings(recheck_s=None, **{"plain_wait_s": 0.3, **changes})


def _text(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result["content"])


async def test_a_plain_call_answers_before_the_wait_ends_and_the_work_goes_on(
    serve: Serve, engine: Engine
) -> None:
    async with serve(_settings()) as client:
        with anyio.fail_after(5):
            deferred = await client.call("pause", {"gate": "later"})
        task = deferred["_meta"][TASK_META]
        assert task == {"taskId": task["taskId"], "status": "working", "deferred": True}
        assert deferred["_meta"][RELATED] == {"taskId": task["taskId"]}
        assert deferred["isError"] is False  # a normal result: the tool has no output schema
        text = _text(deferred)
        assert text.startswith(f"Not finished yet, and not a failure: task {task['taskId']} ")
        assert f'call task_result with task_id "{task["taskId"]}" and wait_s 0.3' in text
        assert len(json.dumps(deferred)) < 2048
        flows.gate("later").set()
        result = await client.call("task_result", {"task_id": task["taskId"], "wait_s": 10})
    assert result["content"][0]["text"] == "opened later"
    assert (await engine.manager.get(task["taskId"])).state is TaskState.COMPLETED


async def test_a_deferred_answer_of_a_tool_with_an_output_schema_is_no_error(
    serve: Serve,
) -> None:
    """A plain host is shown no output schema (ADR 0040), so a deferral needs none."""
    async with serve(_settings()) as client:
        tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
        deferred = await client.call("gated", {"gate": "schema"})
    assert "outputSchema" not in tools["gated"]
    assert deferred["isError"] is False
    assert "not a failure" in _text(deferred)
    assert deferred["_meta"][TASK_META]["deferred"] is True


async def test_a_finished_plain_call_names_its_task(serve: Serve) -> None:
    async with serve(_settings(plain_wait_s=10)) as client:
        result = await client.call("countdown", {"start": 2, "tick_s": 0})
        failed = await client.call("fails", {})
    task_id, unnamed = task_named(result)
    assert unnamed["structuredContent"] == {"counted": 2, "lanes": 4}
    assert result["_meta"][TASK_META] == {
        "taskId": task_id,
        "status": "completed",
        "deferred": False,
    }
    assert failed["isError"] is True
    assert failed["_meta"][TASK_META]["status"] == "failed"
    assert failed["content"][-1]["text"].endswith(": failed)")


async def test_an_error_of_a_plain_call_names_its_task(serve: Serve, engine: Engine) -> None:
    async with serve(_settings(plain_wait_s=10)) as client:
        error = await client.error("tools/call", {"name": "broken", "arguments": {}})
    (task,) = (await engine.manager.list()).tasks
    assert error.code == types.INTERNAL_ERROR
    assert error.message.startswith(f"Task {task.id} failed: ")
    assert isinstance(error.data, dict)
    assert error.data["taskId"] == task.id


async def test_without_a_limit_a_plain_call_waits_for_its_result(serve: Serve) -> None:
    settings = _settings(plain_wait_s=None, progress_keepalive_s=0.1)
    async with serve(settings) as client, anyio.create_task_group() as group:
        results: list[dict[str, Any]] = []

        async def call() -> None:
            results.append(await client.call("pause", {"gate": "unlimited"}, progress_token="u"))

        def kept_waiting() -> bool:  # longer than the 0.3 s of the other tests
            return len(client.notifications("notifications/progress")) >= 4

        group.start_soon(call)
        await client.tap.until(kept_waiting)
        flows.gate("unlimited").set()
    assert task_named(results[0])[1]["content"] == [{"type": "text", "text": "opened unlimited"}]


async def test_progress_keeps_a_waiting_host_waiting(serve: Serve) -> None:
    settings = _settings(plain_wait_s=1.0, progress_keepalive_s=0.1)
    async with serve(settings) as client:
        deferred = await client.call("pause", {"gate": "quiet"}, progress_token="p")
        progress = client.notifications("notifications/progress")
    values = [notification["progress"] for notification in progress]
    assert {notification["progressToken"] for notification in progress} == {"p"}
    assert len(values) >= 5  # at least every 0.1 s of a 1 s wait, though nothing advanced
    assert all(later > earlier for earlier, later in itertools.pairwise(values))
    assert deferred["_meta"][TASK_META]["deferred"] is True


async def test_a_plain_call_asks_its_question_through_elicitation(serve: Serve) -> None:
    asked: list[dict[str, Any]] = []

    async def human(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    for version in ("2025-11-25", "2025-06-18"):  # with and without task support
        asked.clear()
        async with serve(
            _settings(plain_wait_s=10), protocol_version=version, elicitation_callback=human
        ) as client:
            result = await client.call("ask", {})
        task_id, unnamed = task_named(result)
        assert unnamed["content"] == [{"type": "text", "text": "Hello, Ada!"}]
        (question,) = asked
        assert question["message"] == "Your name?"
        assert question["_meta"] == {RELATED: {"taskId": task_id}}


async def test_without_elicitation_the_deferred_answer_says_how_to_answer(
    serve: Serve, engine: Engine
) -> None:
    async with serve(_settings(plain_wait_s=30)) as client:
        with anyio.fail_after(10):  # at once: nobody can answer on this call
            deferred = await client.call("ask", {})
        task_id = deferred["_meta"][TASK_META]["taskId"]
        assert deferred["_meta"][TASK_META]["status"] == "input_required"
        text = _text(deferred)
        assert "question 'greet#1': Your name?" in text
        assert '"required":["name"]' in text
        assert f'call task_answer with task_id "{task_id}" and answer' in text
        answered = await client.call("task_answer", {"task_id": task_id, "answer": {"name": "Bo"}})
        assert answered["isError"] is False
        result = await client.call("task_result", {"task_id": task_id, "wait_s": 10})
    assert result["content"][0]["text"] == "Hello, Bo!"


async def test_on_2026_a_plain_call_sends_no_request_and_defers_its_question(
    serve: Serve,
) -> None:
    async with serve(_settings(plain_wait_s=30), modern=True) as client:
        assert isinstance(client, ModernClient)
        with anyio.fail_after(10):
            deferred = await client.call("ask", {}, declare=False)
        requests = [m for m in client.tap.messages if "method" in m and "id" in m]
    assert deferred["_meta"][TASK_META]["status"] == "input_required"
    assert "call task_answer" in _text(deferred)
    assert requests == []  # M34: input goes out only as data on 2026


async def test_answers_that_do_not_fit_end_in_the_deferred_answer(serve: Serve) -> None:
    asked: list[str] = []

    async def careless(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"nom": "Ada"})

    async with serve(_settings(plain_wait_s=30), elicitation_callback=careless) as client:
        with anyio.fail_after(10):
            deferred = await client.call("ask", {})
    assert len(asked) == MAX_ASKS
    assert deferred["_meta"][TASK_META]["status"] == "input_required"
    assert "the last answer did not fit: answer: 'name' is a required property" in _text(deferred)


async def test_a_plain_call_cancelled_by_its_host_keeps_its_task(
    serve: Serve, engine: Engine
) -> None:
    async with serve(_settings(plain_wait_s=30)) as client:
        assert isinstance(client, LegacyClient)
        with anyio.move_on_after(0.3):  # the host's own timeout: notifications/cancelled
            await client.call("pause", {"gate": "host-timeout"})
        (task,) = (await engine.manager.list()).tasks
        listed = await client.call("task_list", {})
    assert task.id in _text(listed)
    flows.gate("host-timeout").set()
    with anyio.fail_after(10):
        finished = await engine.manager.wait_until_terminal(task.id)
    assert finished.state is TaskState.COMPLETED
