"""Unknown argument keys are refused by name on every path (issue 16, ADR 0022): a task
call answers -32602, a plain call a tool error; no task is created. The tools' schemas
say so (``additionalProperties: false``) and their descriptions are never pydantic's."""

from mcp_types import INVALID_PARAMS

from taskloom.bootstrap import Engine
from tests.server.client import LegacyClient
from tests.server.modern_client import ModernClient

TYPO = {"strat": 3}
REFUSAL = "invalid arguments for countdown: unknown argument 'strat' (it takes: start, tick_s"


async def test_tools_list_refuses_unknown_keys_and_describes_every_tool(
    client: LegacyClient,
) -> None:
    tools = (await client.request("tools/list"))["tools"]
    for tool in tools:
        assert tool["inputSchema"]["additionalProperties"] is False, tool["name"]
        assert tool["description"], tool["name"]
        assert "Usage Documentation" not in tool["description"], tool["name"]


async def test_a_task_call_with_an_unknown_key_is_32602(
    client: LegacyClient, engine: Engine
) -> None:
    error = await client.error(
        "tools/call", {"name": "countdown", "arguments": TYPO, "task": {"ttl": 60_000}}
    )
    assert error.code == INVALID_PARAMS
    assert error.message.startswith(REFUSAL)
    assert (await engine.manager.list()).tasks == ()


async def test_a_plain_call_with_an_unknown_key_is_a_tool_error(
    client: LegacyClient, engine: Engine
) -> None:
    result = await client.call("countdown", TYPO)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(REFUSAL)
    assert (await engine.manager.list()).tasks == ()


async def test_a_modern_task_call_with_an_unknown_key_is_32602(modern: ModernClient) -> None:
    error = await modern.error("tools/call", {"name": "countdown", "arguments": TYPO})
    assert error.code == INVALID_PARAMS
    assert error.message.startswith(REFUSAL)


async def test_a_fallback_tool_refuses_an_unknown_key(client: LegacyClient) -> None:
    result = await client.call("task_status", {"task_id": "x", "taskid": "x"})
    assert result["isError"] is True
    assert result["content"][0]["text"] == (
        "invalid arguments for task_status: unknown argument 'taskid' (it takes: task_id)"
    )
