"""The fallback tools: the task store through plain tool calls, compact, for hosts
without MCP Tasks support."""

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import Engine
from taskloom.commands.render import task_lines
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.models import InputRequest, Progress, Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.server import TaskServer
from taskloom.server.fallback import LINE_LIMIT, status_lines, summary_line
from tests.server import flows
from tests.server.client import LegacyClient
from tests.server.conftest import Connect

FALLBACK = {"task_list", "task_status", "task_result", "task_cancel", "task_answer"}


def _text(result: dict[str, Any]) -> str:
    text: str = result["content"][0]["text"]
    return text


async def test_l3_fallback_tools_are_listed_without_task_support(client: LegacyClient) -> None:
    tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    assert set(tools) >= FALLBACK
    for name in FALLBACK:
        assert "execution" not in tools[name]  # absent means forbidden
        assert tools[name]["inputSchema"]["type"] == "object"


async def test_l4_a_task_param_on_a_forbidden_tool_is_32601(client: LegacyClient) -> None:
    error = await client.error(
        "tools/call", {"name": "task_list", "arguments": {}, "task": {"ttl": 1000}}
    )
    assert error.code == -32601
    assert "task_list" in error.message


async def test_task_list_pages_are_compact_and_filterable(client: LegacyClient) -> None:
    ids = {await client.start("gated", {"gate": "list"}) for _ in range(12)}
    first = _text(await client.call("task_list"))
    assert len(first.encode()) < 2048
    lines = first.splitlines()
    assert len(lines) == 11  # ten tasks and the cursor
    cursor = lines[-1].removeprefix("next_cursor: ")
    second = _text(await client.call("task_list", {"cursor": cursor})).splitlines()
    listed = {line.split()[0] for line in lines[:-1] + second}
    assert listed == ids
    assert _text(await client.call("task_list", {"status": "completed"})) == "no tasks"
    working = _text(await client.call("task_list", {"status": "working", "limit": 50}))
    assert len(working.splitlines()) == 12


def test_a_summary_line_is_bounded_so_a_default_page_stays_under_2_kb() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    task = Task(
        id=TaskId("x" * 43),
        name="n" * 128,
        arguments={},
        owner=None,
        state=TaskState.RUNNING,
        status_message="m" * 1000,
        created_at=now,
        updated_at=now,
        ttl_ms=None,
        version=2,
    )
    line = summary_line(task)
    assert len(line) == LINE_LIMIT
    cursor_line = "next_cursor: " + "c" * 40
    assert len("\n".join([line] * 10 + [cursor_line]).encode()) < 2048


async def test_status_result_and_cancel(client: LegacyClient) -> None:
    task_id = await client.start("gated", {"gate": "fallback"})
    status = _text(await client.call("task_status", {"task_id": task_id}))
    assert status.startswith(f"task {task_id}: working (gated)")
    waiting = await client.call("task_result", {"task_id": task_id})
    assert waiting["isError"] is False
    assert "not finished: call task_result again (with wait_s 45 to wait)" in _text(waiting)
    flows.gate("fallback").set()
    finished = await client.call("task_result", {"task_id": task_id, "wait_s": 30})
    via_tasks = await client.result(task_id)
    del via_tasks["_meta"]
    assert finished == via_tasks

    other = await client.start("gated", {"gate": "never"})
    assert _text(await client.call("task_cancel", {"task_id": other})) == (
        f"task {other} is cancelled"
    )
    again = await client.call("task_cancel", {"task_id": other})
    assert again["isError"] is True
    assert _text(again) == "Cannot cancel task: already in terminal status 'cancelled'"
    cancelled = await client.call("task_result", {"task_id": other})
    assert cancelled["isError"] is True
    assert "was cancelled" in _text(cancelled)


async def test_task_answer_answers_the_pending_question(client: LegacyClient) -> None:
    task_id = await client.start("ask", {})
    await client.tap.until(lambda: "input_required" in client.statuses(task_id))
    status = _text(await client.call("task_status", {"task_id": task_id}))
    assert "question 'greet#1': Your name?" in status
    assert '"required":["name"]' in status
    wrong = await client.call("task_answer", {"task_id": task_id, "answer": {"nom": "x"}})
    assert wrong["isError"] is True
    assert "does not match the requested schema" in _text(wrong)
    right = await client.call("task_answer", {"task_id": task_id, "answer": {"name": "Ada"}})
    assert _text(right).startswith("answer to 'greet#1' stored")
    result = await client.call("task_result", {"task_id": task_id, "wait_s": 30})
    assert _text(result) == "Hello, Ada!"
    late = await client.call("task_answer", {"task_id": task_id, "answer": {"name": "Bo"}})
    assert late["isError"] is True
    assert "not waiting for an answer (completed)" in _text(late)


async def test_task_result_shows_a_question_at_once_instead_of_waiting(
    client: LegacyClient,
) -> None:
    task_id = await client.start("ask", {})
    with anyio.fail_after(10):  # not the 60 s asked for: only task_answer can move it on
        waiting = await client.call("task_result", {"task_id": task_id, "wait_s": 60})
    assert waiting["isError"] is False
    assert "question 'greet#1': Your name?" in _text(waiting)
    assert _text(waiting).endswith("answer it with task_answer, then call task_result")


async def test_the_descriptions_tell_a_model_how_to_poll_wait_and_answer(
    client: LegacyClient,
) -> None:
    tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
    result = tools["task_result"]["description"]
    assert "wait_s (up to 45)" in result  # what a plain call waits: it fits the same hosts
    assert "call task_result again" in result
    assert "task_answer" in result
    assert "task_result with wait_s" in tools["task_status"]["description"]
    assert "matching the question's answer schema" in tools["task_answer"]["description"]
    assert "maximum" not in tools["task_result"]["inputSchema"]["properties"]["wait_s"]


def test_a_status_stays_under_2_kb_whatever_the_task_holds() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    huge = {"type": "object", "properties": {f"field_{n}": {"type": "string"} for n in range(99)}}
    question = InputRequest(message="Why? " * 200, requested_schema=huge)
    task = Task(
        id=TaskId("x" * 43),
        name="n" * 128,
        arguments={},
        owner=None,
        state=TaskState.INPUT_REQUIRED,
        status_message="m" * 1000,
        input_requests={f"{n}" * 60: question for n in range(5)},
        progress=Progress(completed=3, total=7),
        created_at=now,
        updated_at=now,
        ttl_ms=None,
        version=2,
    )
    lines = status_lines(task)
    assert len("\n".join(lines).encode()) < 1600  # and room for a deferred answer's lines
    assert lines[-1] == "… 3 more question(s)"


async def test_mistakes_are_tool_errors(client: LegacyClient) -> None:
    unknown = await client.call("task_status", {"task_id": "nope"})
    assert unknown == {
        "content": [{"type": "text", "text": "Task not found: nope"}],
        "isError": True,
    }
    bad = await client.call("task_result", {"task_id": "x", "wait_s": -1})
    assert bad["isError"] is True
    assert _text(bad).startswith("invalid arguments for task_result: wait_s")
    assert (await client.call("task_list", {"cursor": "bogus"}))["isError"] is True


async def test_hosts_without_tasks_use_the_fallback_tools(connect: Connect) -> None:
    async with connect(protocol_version="2025-06-18") as old:
        listed = _text(await old.call("task_list"))
        assert listed == "no tasks"


async def test_a_workflow_may_not_take_a_fallback_tools_name(engine: Engine) -> None:
    class Empty(BaseModel):
        pass

    clash = Workflow("task_list", version="1", input=Empty)

    @clash.node()
    async def noop(ctx: NodeContext[Empty]) -> int:
        return 0

    with pytest.raises(WorkflowDefinitionError, match="built-in tool"):
        TaskServer(engine.manager, {"task_list": clash})


def test_a_child_task_names_its_parent_in_task_status_and_the_cli() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    child = Task(
        id=TaskId("c" * 24),
        name="doubler",
        arguments={},
        owner=None,
        state=TaskState.RUNNING,
        created_at=now,
        updated_at=now,
        ttl_ms=None,
        parent_id=TaskId("p" * 24),
        version=1,
    )
    assert f"child of task {'p' * 24}" in status_lines(child)
    assert f"parent     {'p' * 24}" in task_lines(child)
    assert not any(
        "parent" in line for line in task_lines(child.model_copy(update={"parent_id": None}))
    )
