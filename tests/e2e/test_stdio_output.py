"""`taskloom serve` over stdio writes its answers itself (``stdout_lines``): node output
printed to stdout reaches stderr, never the protocol, and answers of any size arrive
whole and in order."""

import sys
from pathlib import Path

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.e2e.test_stdio_server import REPOSITORY
from tests.helpers import eventually
from tests.server.client import open_client

SIZES = (10, 5_000, 200_000, 3)  # below, above and far above PIPE_BUF, then small again


async def test_stray_output_misses_the_protocol_and_large_answers_arrive(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        env={"PYTHONPATH": str(REPOSITORY), "TASKLOOM_WORKFLOWS": "tests.e2e.chatty_flow"},
        cwd=tmp_path,
    )
    with anyio.fail_after(60), (tmp_path / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            open_client(*streams) as client,
        ):
            ids = [await client.start("chatty", {"size": size}) for size in SIZES]
            for task_id, size in zip(ids, SIZES, strict=True):

                async def completed(task_id: str = task_id) -> bool:
                    return (await client.get(task_id))["status"] == "completed"

                await eventually(completed, within_s=30, every_s=0.02)
                result = await client.result(task_id)
                assert result["content"][0]["text"] == "x" * size, str(result)[:300]
    log = (tmp_path / "stderr.log").read_text()
    assert log.count("a stray line from node code") == len(SIZES)
    assert "Traceback" not in log
