"""`taskloom serve --http` as a real process: its text log on stderr cannot be forged
through a value of a request, and a malformed body gets its spec code."""

import signal
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.helpers import checkout_env, free_port, until_http_listening
from tests.server.http_support import ANN, bearer, http_client

FORGED = "x\n2026-11-24 00:00:00,000 INFO taskloom.audit: cancel ok principal=root"


@pytest.mark.slow
async def test_a_forged_line_stays_inside_its_field_in_the_real_text_log(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    env = checkout_env() | {
        "TASKLOOM_HTTP": url.removeprefix("http://").removesuffix("/mcp"),
        "TASKLOOM_TOKENS": f"ann:{ANN}",
        "TASKLOOM_LOG_LEVEL": "info",
    }
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(url)
            async with httpx2.AsyncClient(timeout=5) as http:
                batch = await http.post(url, json=[{"jsonrpc": "2.0"}], headers=bearer(ANN))
                assert (batch.status_code, batch.json()["error"]["code"]) == (400, -32600)
            with anyio.fail_after(60):
                async with http_client(url, ANN) as ann:
                    for method in ("tasks/get", "tasks/cancel"):
                        with pytest.raises(MCPError):
                            await ann.request(method, {"taskId": FORGED})
                    answer = await ann.call("task_status", {"task_id": FORGED})
                    assert answer["isError"] is True
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()
    lines = (tmp_path / "stderr.log").read_text().splitlines()
    audit = [line for line in lines if " taskloom.audit: " in line]
    assert len(audit) == 3, audit
    assert all(" principal=ann " in line for line in audit)
    assert not any(line.startswith("2026-11-24 00:00:00") for line in lines)
    assert "Traceback" not in "\n".join(lines)
