"""`python -m taskloom serve` as a real process, driven over stdio by the SDK's client."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.helpers import checkout_env, eventually
from tests.server.client import LegacyClient, open_client

REPOSITORY = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def serving(
    tmp_path: Path, elicitation_callback: ElicitationFnT | None = None
) -> AsyncIterator[LegacyClient]:
    """A client of `python -m taskloom serve` on tmp_path/x.db, with the test workflows
    (named through the environment, as a user would)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        env=checkout_env({}, TASKLOOM_WORKFLOWS="tests.server.flows"),
        cwd=tmp_path,
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            open_client(*streams, elicitation_callback=elicitation_callback) as client,
        ):
            yield client


async def _status(client: LegacyClient, task_id: str) -> str:
    status: str = (await client.get(task_id))["status"]
    return status


@pytest.mark.slow
async def test_a_real_server_runs_cancels_and_keeps_tasks(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with serving(tmp_path) as client:
            assert "tasks" in client.initialize_result["capabilities"]
            done = await client.start("countdown", {"start": 4, "tick_s": 0})
            slow = await client.start("countdown", {"start": 400, "tick_s": 0.05})

            async def completed() -> bool:
                return await _status(client, done) == "completed"

            await eventually(completed, within_s=20, every_s=0.05)
            result = await client.result(done)
            assert result["structuredContent"] == {"counted": 4, "lanes": 4}
            assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": done}

            async def counting() -> bool:  # mid-phase: the lanes are counting
                message = (await client.get(slow)).get("statusMessage", "")
                return str(message).startswith("phase 2/3 count")

            await eventually(counting, within_s=20, every_s=0.05)
            assert (await client.cancel(slow))["status"] == "cancelled"
            with pytest.raises(MCPError) as raised:
                await client.result(slow)
            assert raised.value.error.data == {"taskId": slow, "status": "cancelled"}

        async with serving(tmp_path) as again:  # a new process on the same database
            assert await _status(again, slow) == "cancelled"
            replay: dict[str, Any] = await again.result(done)
            assert replay == result
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.slow
async def test_a_real_server_asks_for_input_through_elicitation(tmp_path: Path) -> None:
    asked: list[dict[str, Any]] = []

    async def human(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    with anyio.fail_after(60):
        async with serving(tmp_path, human) as client:
            task_id = await client.start("ask", {"question": "Who are you?"})

            async def waiting() -> bool:
                return await _status(client, task_id) == "input_required"

            await eventually(waiting, within_s=20, every_s=0.05)
            result = await client.result(task_id)
    assert result["content"] == [{"type": "text", "text": "Hello, Grace!"}]
    assert asked[0]["message"] == "Who are you?"
    assert asked[0]["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
