"""`taskloom serve` as a real process behind a plain host (ADR 0018): the SDK's own client
with a short request timeout and no task support, as Cursor or Claude Desktop call it."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.helpers import checkout_env

REPOSITORY = Path(__file__).resolve().parents[2]
HOST_TIMEOUT_S = 5.0
"""The plain host's timeout on a call: scaled down from Cursor's and Claude Desktop's."""
THREE_TIMEOUTS = {"start": 60, "tick_s": 1.0}
"""countdown: four lanes of 15 numbers at one a second, three times the host's timeout."""
TASK_META = "taskloom/task"


@asynccontextmanager
async def plain_host(
    tmp_path: Path,
    *,
    timeout_s: float,
    plain_wait_s: float,
    elicitation_callback: ElicitationFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """The SDK's client, giving up on any request after *timeout_s*, of `taskloom serve`."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        env=checkout_env({})
        | {
            "TASKLOOM_WORKFLOWS": "tests.server.flows",
            "TASKLOOM_PLAIN_WAIT_S": str(plain_wait_s),
        },
        cwd=tmp_path,
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read,
                write,
                read_timeout_seconds=timeout_s,
                elicitation_callback=elicitation_callback,
            ) as session,
        ):
            with anyio.fail_after(20):
                await session.initialize()
            yield session


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def _finish(session: ClientSession, task_id: str, wait_s: float) -> types.CallToolResult:
    """Follow the task with task_result, as the deferred answer says, until it ends
    (each call waiting *wait_s*, under the host's timeout)."""
    arguments = {"task_id": task_id, "wait_s": wait_s}
    with anyio.fail_after(90):
        while True:
            result = await session.call_tool("task_result", arguments)
            if "not finished" not in _text(result):
                return result


@pytest.mark.slow
async def test_a_plain_host_gets_the_deferred_answer_in_time_then_the_result(
    tmp_path: Path,
) -> None:
    async with plain_host(tmp_path, timeout_s=HOST_TIMEOUT_S, plain_wait_s=3) as session:
        started = anyio.current_time()
        deferred = await session.call_tool("countdown", THREE_TIMEOUTS)
        answered_s = anyio.current_time() - started
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert listed["countdown"].output_schema is None  # nothing a deferral could fail
        assert deferred.is_error is False  # no failure: the SDK checked it and let it pass
        assert deferred.meta is not None
        task = deferred.meta[TASK_META]
        assert task["deferred"] is True
        assert task["status"] == "working"
        assert f'task_result with task_id "{task["taskId"]}"' in _text(deferred)
        result = await _finish(session, task["taskId"], wait_s=3)
    assert answered_s < HOST_TIMEOUT_S  # before the host gives up
    assert result.is_error is False
    assert result.structured_content == {"counted": 60, "lanes": 4}
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.slow
async def test_a_host_that_gives_up_before_the_deferral_loses_no_work(tmp_path: Path) -> None:
    async with plain_host(tmp_path, timeout_s=10, plain_wait_s=20) as session:
        with pytest.raises(MCPError) as raised:  # a host with a 2 s timeout on its calls
            await session.call_tool("countdown", THREE_TIMEOUTS, read_timeout_seconds=2)
        assert raised.value.error.code == types.REQUEST_TIMEOUT  # and notifications/cancelled
        listed = _text(await session.call_tool("task_list", {}))
        task_id = listed.split()[0]
        assert " working  countdown " in listed
        result = await _finish(session, task_id, wait_s=5)
    assert result.structured_content == {"counted": 60, "lanes": 4}


@pytest.mark.slow
async def test_a_plain_call_with_elicitation_gets_its_question_and_completes(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def human(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async with plain_host(
        tmp_path, timeout_s=10, plain_wait_s=5, elicitation_callback=human
    ) as session:
        result = await session.call_tool("ask", {})
    assert asked == ["Your name?"]
    assert _text(result).startswith("Hello, Grace!")
    assert result.meta is not None
    assert result.meta[TASK_META]["status"] == "completed"
