"""A real ``taskloom serve``: a token revoked by another process (``taskloom tokens
revoke``), or one that expires, stops every long-lived answer it holds open: the
``subscriptions/listen`` stream, both dashboard streams, a 2025-11-25 session's GET
stream, a ``tasks/result`` wait and a plain call's wait fall silent within 1 s and end
within 2 s, on SQLite and on PostgreSQL."""

import signal
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.e2e.live_streams import (
    CLOSING_BYTES,
    Stream,
    create_token,
    database,
    environment,
    expiry_of,
    keep_busy,
    new_url,
    open_streams,
    record,
    server,
    serving,
    taskloom,
)
from tests.helpers import eventually, free_port

SILENT_S = 1.0
ENDED_S = 2.0
EXPIRES = "12s"  # room to open six streams on a loaded 2-core machine


@pytest.mark.slow
@pytest.mark.parametrize(
    ("store", "ending"), [("sqlite", "revoked"), ("sqlite", "expired"), ("postgres", "revoked")]
)
async def test_a_revoked_or_expired_token_ends_every_stream_it_holds_open(
    tmp_path: Path, store: str, ending: str
) -> None:
    url = new_url()
    env = environment(url)
    async with database(store, tmp_path) as db:
        token = await create_token(db, env)  # an active one before it starts: tokens on
        async with (
            server(db, env, tmp_path / "stderr.log"),
            httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
            anyio.create_task_group() as group,
        ):
            await serving(url)
            if ending == "expired":  # made now, so that it lives just long enough
                token = await create_token(db, env, expires=EXPIRES)
            group.start_soon(keep_busy, http, url)
            streams = await open_streams(group, http, url, token)
            if ending == "revoked":
                await taskloom("tokens", "revoke", token[3:15], "--db", db, env=env)
                ended = anyio.current_time()  # the command has returned
            else:
                expires_at = await expiry_of(db, token, env)
                ended = anyio.current_time() + (expires_at - time.time())
                assert ended > anyio.current_time() + 1, "the token expired before the streams"
            with anyio.move_on_after(ended + ENDED_S + 1 - anyio.current_time()):
                for stream in streams.values():
                    await stream.closed.wait()
            group.cancel_scope.cancel()
    for name, stream in streams.items():
        assert stream.ended_at is not None, f"{name} is still open"
        assert stream.ended_at <= ended + ENDED_S, (
            f"{name} ended {stream.ended_at - ended:.2f} s after"
        )
        late = stream.sent_after(ended + SILENT_S)
        assert late < CLOSING_BYTES, f"{name} sent {late} bytes more than {SILENT_S} s after"
    assert "event: end" in streams["ui events"].text  # the page reloads, and asks to sign in
    log = (tmp_path / "stderr.log").read_text()
    endings = [line for line in log.splitlines() if f"taskloom.audit: end {ending}" in line]
    assert len(endings) >= len(streams), log
    assert "Traceback" not in log
    assert " ERROR " not in log


@pytest.mark.slow
async def test_taskloom_ui_alone_ends_a_live_page_of_a_revoked_token(tmp_path: Path) -> None:
    db, port = str(tmp_path / "x.db"), free_port()
    env = environment(new_url())
    token = await create_token(db, env)
    command = [sys.executable, "-m", "taskloom", "ui", "--db", db, "--port", str(port)]
    base = f"http://127.0.0.1:{port}/ui"
    with (tmp_path / "ui.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            async with (
                httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
                anyio.create_task_group() as group,
            ):

                async def listening() -> bool:
                    try:
                        return (await http.get(f"{base}/login")).status_code == 200
                    except httpx2.TransportError:
                        return False

                await eventually(listening, within_s=30, every_s=0.05)
                page = Stream("ui events")
                auth = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
                group.start_soon(record, http, page, "GET", f"{base}/events", auth)
                with anyio.fail_after(10):
                    await page.opened.wait()
                assert page.status == 200
                await taskloom("tokens", "revoke", token[3:15], "--db", db, env=env)
                ended = anyio.current_time()
                with anyio.fail_after(ENDED_S + 1):
                    await page.closed.wait()
                group.cancel_scope.cancel()
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()
    assert page.ended_at is not None
    assert page.ended_at <= ended + ENDED_S
    assert page.text.endswith("event: end\ndata: {}\n\n")
    assert "Traceback" not in (tmp_path / "ui.log").read_text()
