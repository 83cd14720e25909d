"""`python -m taskloom serve --http` with OAuth from the environment, as a real process."""

import signal
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.helpers import checkout_env, free_port, until_http_listening
from tests.server.http_support import http_client
from tests.server.oauth_issuer import RESOURCE, Issuer, issuing, rsa_key


@pytest.mark.slow
async def test_a_real_server_takes_its_principal_from_the_tokens_sub(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with issuing(Issuer([rsa_key("k1")])) as issuer:
        env = checkout_env() | {
            "TASKLOOM_HTTP": url.removeprefix("http://").removesuffix("/mcp"),
            "TASKLOOM_OAUTH_ISSUER": issuer.url,
            "TASKLOOM_OAUTH_AUDIENCE": RESOURCE,
        }
        env.pop("TASKLOOM_TOKENS", None)
        command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
        token = issuer.token("ann")
        with (tmp_path / "stderr.log").open("w") as errlog:
            process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
            try:
                await until_http_listening(url)
                with anyio.fail_after(60):
                    async with http_client(url, token) as ann:
                        task_id = await ann.start("countdown", {"start": 3, "tick_s": 0})
                        result = await ann.result(task_id)
                    async with httpx2.AsyncClient(timeout=5) as http:
                        refused = await http.post(
                            url, json={}, headers={"Authorization": "Bearer x.y.z"}
                        )
            finally:
                process.send_signal(signal.SIGINT)
                with anyio.fail_after(20):
                    await process.wait()
    assert result["structuredContent"] == {"counted": 3, "lanes": 4}
    assert refused.status_code == 401
    assert (
        'resource_metadata="https://mcp.test/.well-known/oauth-protected-resource/mcp"'
        in (refused.headers["www-authenticate"])
    )
    log = (tmp_path / "stderr.log").read_text()
    assert token not in log
    assert "Traceback" not in log
