"""`python -m taskloom serve --http` as a real process, tokens from the environment."""

import signal
import sys
from pathlib import Path

import anyio
import pytest

from tests.helpers import checkout_env, free_port, until_http_listening
from tests.server.http_support import ANN, BOB, http_client


@pytest.mark.slow
async def test_a_real_http_server_serves_each_principal_its_own_tasks(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    env = checkout_env() | {
        "TASKLOOM_HTTP": url.removeprefix("http://").removesuffix("/mcp"),
        "TASKLOOM_TOKENS": f"ann:{ANN},bob:{BOB}",
    }
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(url)
            with anyio.fail_after(60):
                async with http_client(url, ANN) as ann, http_client(url, BOB) as bob:
                    task_id = await ann.start("countdown", {"start": 4, "tick_s": 0})
                    result = await ann.result(task_id)
                    assert result["structuredContent"] == {"counted": 4, "lanes": 4}
                    assert (await bob.list_tasks())["tasks"] == []
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()
    log = (tmp_path / "stderr.log").read_text()
    assert ANN not in log
    assert BOB not in log
    assert "Traceback" not in log
