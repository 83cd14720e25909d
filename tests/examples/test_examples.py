"""The projects in examples/ work as their READMEs say: run as real processes, as a user
would run them."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import checkout_env, eventually, free_port
from tests.server.client import open_client

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLES = REPOSITORY / "examples"
READY = {"version": "1.2.3", "changelog": "## 1.2.3\n- faster"}


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def _use_the_server(session: ClientSession) -> None:
    """Its own tool, resource and prompt answer as before; the durable tools answer too."""
    await session.initialize()
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"add", "word_stats", "release_checklist", "task_status", "task_result"} <= names
    assert (await session.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    resource = await session.read_resource("notes://readme")
    assert "two durable tools" in resource.contents[0].text  # type: ignore[union-attr]
    prompt = await session.get_prompt("review", {"topic": "the API"})
    assert "the API" in prompt.messages[0].content.text  # type: ignore[union-attr]
    stats = await session.call_tool("word_stats", {"text": "one two\nthree"})
    assert stats.is_error is False
    assert stats.structured_content == {"words": 3, "lines": 2, "chars": 13}
    verdict = await session.call_tool("release_checklist", READY)
    assert _text(verdict).startswith("ready")
    refused = await session.call_tool("release_checklist", {"version": "1.2.3", "chnagelog": ""})
    assert refused.is_error is True
    assert "chnagelog" in _text(refused)


@pytest.mark.slow
async def test_the_existing_server_keeps_its_tools_and_gains_durable_ones(
    tmp_path: Path,
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(EXAMPLES / "existing_server" / "server.py")],
        env=checkout_env({}, NOTES_TASKS_DB=str(tmp_path / "n.db")),
        cwd=tmp_path,
    )
    with anyio.fail_after(60), (tmp_path / "stderr.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            ClientSession(*streams) as session,
        ):
            await _use_the_server(session)
        async with (  # a host with task support gets a task (2025-11-25)
            stdio_client(params, errlog=errlog) as streams,
            open_client(*streams) as tasks_host,
        ):
            task_id = await tasks_host.start("release_checklist", READY)
            result = await tasks_host.result(task_id)
            assert result["content"][0]["text"] == "ready"
    assert (tmp_path / "n.db").is_file()


def test_the_existing_server_says_in_one_line_that_it_cannot_write_its_database(
    tmp_path: Path,
) -> None:
    """Issue 26: not a traceback; the line names the file and the setting."""
    nowhere = tmp_path / "missing-folder" / "n.db"  # cannot be created: its folder is absent
    ran = subprocess.run(
        [sys.executable, str(EXAMPLES / "existing_server" / "server.py")],
        env=checkout_env({}, NOTES_TASKS_DB=str(nowhere)),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 1
    expected = (
        f"notes: cannot write the task database {nowhere}: No such file or directory; "
        "set NOTES_TASKS_DB to a file in a folder you can write"
    )
    assert ran.stderr.splitlines() == [expected]


@pytest.mark.slow
async def test_the_fastapi_app_serves_its_routes_and_the_mounted_server(tmp_path: Path) -> None:
    port = free_port()
    command = [
        *(sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(EXAMPLES / "fastapi_app")),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    env = checkout_env(NOTES_TASKS_DB=str(tmp_path / "n.db"))
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "uvicorn.log").open("w") as log:
        process = await anyio.open_process(command, env=env, cwd=tmp_path, stdout=log, stderr=log)
        try:
            async with httpx2.AsyncClient(timeout=5) as http:

                async def healthy() -> bool:
                    try:
                        return bool((await http.get(f"{base}/health")).json() == {"status": "ok"})
                    except httpx2.TransportError:
                        return False

                await eventually(healthy, within_s=30, every_s=0.05)
            with anyio.fail_after(60):
                async with (
                    streamable_http_client(f"{base}/tools/mcp") as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await _use_the_server(session)
        finally:
            process.terminate()
            with anyio.fail_after(20):
                await process.wait()


def test_an_installed_workflow_package_is_found_through_its_entry_point(tmp_path: Path) -> None:
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    install += ["--no-build-isolation", "--target", str(target)]
    subprocess.run([*install, str(EXAMPLES / "workflow_package")], check=True, timeout=120)
    env = checkout_env(PYTHONPATH=str(target))
    taskloom = [sys.executable, "-m", "taskloom"]
    listed = subprocess.run(
        [*taskloom, "workflows", "list", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "bump_version" in {flow["name"] for flow in json.loads(listed.stdout)["workflows"]}
    ran = subprocess.run(
        [*taskloom, "run", "bump_version", "--input", '{"version": "1.4.2", "part": "minor"}'],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert ran.stdout.rstrip().endswith('Result:\n"1.5.0"'), ran.stdout
