"""`taskloom serve` over stdio writes its answers itself (``stdout_lines``): node output
printed to stdout reaches stderr, never the protocol, and answers of any size arrive
whole and in order."""

import os
import subprocess
import sys
from pathlib import Path

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers import checkout_env, eventually
from tests.server.client import open_client

SIZES = (10, 5_000, 200_000, 3)  # below, above and far above PIPE_BUF, then small again


async def test_stray_output_misses_the_protocol_and_large_answers_arrive(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        env=checkout_env({}, TASKLOOM_WORKFLOWS="tests.e2e.chatty_flow"),
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
                    status: str = (await client.get(task_id))["status"]
                    return status == "completed"

                await eventually(completed, within_s=30, every_s=0.02)
                result = await client.result(task_id)
                assert result["content"][0]["text"] == "x" * size, str(result)[:300]
    log = (tmp_path / "stderr.log").read_text()
    assert log.count("a stray line from node code") == len(SIZES)
    assert "Traceback" not in log


def test_serve_with_stdin_and_stdout_on_the_null_device_ends_cleanly(tmp_path: Path) -> None:
    """``/dev/null`` is a character device that epoll refuses: it gets the SDK's own
    reader and writer, and the server ends at its EOF without a traceback."""
    with Path(os.devnull).open("rb") as null_in, Path(os.devnull).open("wb") as null_out:
        done = subprocess.run(
            [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
            stdin=null_in,
            stdout=null_out,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=checkout_env(),
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
