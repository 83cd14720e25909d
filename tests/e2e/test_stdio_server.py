"""`python -m taskloom serve` as a real process, driven over stdio by the SDK's client."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.helpers import eventually
from tests.server.client import LegacyClient, open_client


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[LegacyClient]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        cwd=tmp_path,
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as streams, open_client(*streams) as client:
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

            assert await _status(client, slow) == "working"
            assert (await client.cancel(slow))["status"] == "cancelled"
            with pytest.raises(MCPError) as raised:
                await client.result(slow)
            assert raised.value.error.data == {"taskId": slow, "status": "cancelled"}

        async with serving(tmp_path) as again:  # a new process on the same database
            assert await _status(again, slow) == "cancelled"
            replay: dict[str, Any] = await again.result(done)
            assert replay == result
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
