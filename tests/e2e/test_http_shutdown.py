"""A real ``taskloom serve`` stopped with SIGINT while streams are open: they end, and
the log has no error, no traceback (uvicorn never has to cancel a request) and no
warning of the SDK's (no answer waits for a stream already gone)."""

import signal
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.e2e.live_streams import create_token, environment, new_url, open_streams, server, serving


@pytest.mark.slow
async def test_sigint_with_open_streams_ends_them_quietly(tmp_path: Path) -> None:
    url, db = new_url(), str(tmp_path / "x.db")
    env = environment(url)
    token = await create_token(db, env)
    async with (
        server(db, env, tmp_path / "stderr.log") as process,
        httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
        anyio.create_task_group() as group,
    ):
        await serving(url)
        streams = await open_streams(group, http, url, token)
        process.send_signal(signal.SIGINT)
        stopped = anyio.current_time()
        with anyio.fail_after(15):
            await process.wait()
        exited = anyio.current_time() - stopped
        group.cancel_scope.cancel()
    assert process.returncode == 0
    assert exited < 4, f"the server took {exited:.1f} s to stop"  # not uvicorn's 5 s grace
    for name, stream in streams.items():
        assert stream.ended_at is not None, name
        assert stream.ended_at - stopped < 4, name
    for name in ("ui events", "ui task events"):  # the page connects again, not for good
        assert streams[name].text.endswith("event: stopping\ndata: {}\n\n"), name
    log = (tmp_path / "stderr.log").read_text()
    assert "ERROR" not in log, log
    assert "Traceback" not in log, log
    assert "CancelledError" not in log, log
    assert " WARNING mcp." not in log, log  # no answer waited for a stream already gone
