"""`taskloom serve` as a real process (HTTP with `--settings @FILE.toml`, and stdio):
`repo_audit` reads only under the operator's roots (whatever the spelling: `..`, links,
procfs), a scan stops burning CPU once cancelled, and SIGINT stops a server mid-scan."""

import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers import checkout_env, eventually, free_port, until_http_listening
from tests.server.client import LegacyClient, open_client
from tests.server.http_support import ANN, http_client

HUGE = 64 << 30
"""A sparse file: reading and hashing it all would take far longer than any test."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds used so far by process *pid*."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@asynccontextmanager
async def serving(tmp_path: Path, settings: Path | None) -> AsyncIterator[tuple[str, Process]]:
    """A real HTTP server on 127.0.0.1 with operator settings from *settings*."""
    address = f"127.0.0.1:{free_port()}"
    env = checkout_env(TASKLOOM_TOKENS=f"ann:{ANN}")
    command = [
        *(sys.executable, "-m", "taskloom", "serve", "--http", address),
        *("--db", str(tmp_path / "x.db")),
        *(() if settings is None else ("--settings", f"@{settings}")),
    ]
    url = f"http://{address}/mcp"
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(
            command, env=env, stdout=errlog, stderr=errlog, cwd=tmp_path
        )
        try:
            await until_http_listening(url)
            yield url, process
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.fail_after(20):
                    await process.wait()


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed directory (with a link to /etc and one to /proc/self) and the TOML
    settings that allow it and /proc/self."""
    allowed = tmp_path / "allowed"
    (allowed / "src").mkdir(parents=True)
    (allowed / "src" / "a.py").write_text("# TODO\n")
    (allowed / "etc").symlink_to("/etc", target_is_directory=True)
    (allowed / "proc").symlink_to("/proc/self", target_is_directory=True)
    (allowed / "big").mkdir()
    (allowed / "big" / "huge.bin").touch()
    os.truncate(allowed / "big" / "huge.bin", HUGE)
    settings = tmp_path / "ops.toml"
    roots = json.dumps([str(allowed), "/proc/self"])
    settings.write_text(
        f'[repo_audit]\nallowed_roots = {roots}\nreports_dir = "{tmp_path / "reports"}"\n'
        f"[command_matrix]\nallowed_programs = {json.dumps([sys.executable])}\n"
    )
    return allowed, settings


async def _refusal(client: LegacyClient, arguments: dict[str, Any]) -> str:
    """Why a call is refused, the same as a task (an error) and as a plain call (a tool
    error the model can read)."""
    params = {"name": "repo_audit", "arguments": arguments, "task": {}}
    error = await client.error("tools/call", params)
    assert error.code == -32602, error
    plain = await client.call("repo_audit", arguments)
    assert plain["isError"] is True
    assert error.message in plain["content"][0]["text"]
    return error.message


async def _stored_tasks(tmp_path: Path) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "taskloom", "tasks", "list"]
    with anyio.fail_after(60):
        listed = await anyio.run_process([*command, "--db", str(tmp_path / "x.db"), "--json"])
    tasks: list[dict[str, Any]] = json.loads(listed.stdout)["tasks"]
    return tasks


@pytest.mark.slow
async def test_paths_outside_the_roots_are_refused_before_a_task_exists(tmp_path: Path) -> None:
    allowed, settings = _tree(tmp_path)
    with anyio.fail_after(90):
        async with serving(tmp_path, settings) as (url, _), http_client(url, ANN) as ann:
            outside = "is outside the directories this server may audit"
            for path in ("/etc", f"{allowed}/../../../../etc", "../../../../etc", "/proc/1"):
                assert outside in await _refusal(ann, {"path": path}), path
            assert outside in await _refusal(ann, {"path": str(allowed / "etc")})  # a link
            pseudo = "kernel pseudo file system (proc)"
            assert pseudo in await _refusal(ann, {"path": "/proc/self"})
            assert pseudo in await _refusal(ann, {"path": str(allowed / "proc")})
            assert await _stored_tasks(tmp_path) == []

            # Inside the roots, links followed: /etc stays unread, procfs is not entered.
            task = await ann.start(
                "repo_audit", {"path": str(allowed), "follow_symlinks": True, "max_file_bytes": 0}
            )

            async def done() -> bool:
                return bool((await ann.get(task))["status"] == "completed")

            await eventually(done, within_s=30, every_s=0.05)
            report = (await ann.result(task))["structuredContent"]
            assert report["files"] == 2, report  # src/a.py and big/huge.bin (not read)
            assert report["symlinks_skipped"] == 1  # the link to /etc

            # The same file enables command_matrix on this server.
            argv = [sys.executable, "-c", "print('allowed')"]
            matrix = await ann.start("command_matrix", {"commands": [{"argv": argv}]})

            async def ran() -> bool:
                return bool((await ann.get(matrix))["status"] == "completed")

            await eventually(ran, within_s=30, every_s=0.05)
            outcome = (await ann.result(matrix))["structuredContent"]
            assert outcome["commands"][0]["stdout_tail"] == "allowed"


@pytest.mark.slow
async def test_unconfigured_http_audits_nothing_and_stdio_its_working_directory(
    tmp_path: Path,
) -> None:
    allowed, _ = _tree(tmp_path)
    with anyio.fail_after(90):
        async with serving(tmp_path, None) as (url, _), http_client(url, ANN) as ann:
            refused = await _refusal(ann, {"path": str(allowed)})
            assert "the operator has allowed none" in refused
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "taskloom", "serve", "--db", str(tmp_path / "stdio.db")],
            env=checkout_env({}),
            cwd=allowed,
        )
        with (tmp_path / "stdio.log").open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as streams,
                open_client(*streams) as local,
            ):
                assert "outside the directories" in await _refusal(local, {"path": "/etc"})
                assert "outside the directories" in await _refusal(local, {"path": ".."})
                task = await local.start("repo_audit", {"path": "src", "write_report": False})

                async def done() -> bool:
                    return bool((await local.get(task))["status"] == "completed")

                await eventually(done, within_s=30, every_s=0.05)
                assert (await local.result(task))["structuredContent"]["files"] == 1


@pytest.mark.slow
async def test_a_cancelled_scan_stops_using_cpu_and_sigint_stops_the_server(
    tmp_path: Path,
) -> None:
    allowed, settings = _tree(tmp_path)
    big = {"path": str(allowed / "big"), "shards": 1, "max_file_bytes": 2 * HUGE}
    with anyio.fail_after(120):
        async with serving(tmp_path, settings) as (url, server), http_client(url, ANN) as ann:
            idle = _cpu_s(server.pid)
            task = await ann.start("repo_audit", {**big, "write_report": False})

            async def scanning() -> bool:  # the shard is hashing: a core is busy
                return _cpu_s(server.pid) - idle > 0.5

            await eventually(scanning, within_s=30, every_s=0.05)
            assert (await ann.cancel(task))["status"] == "cancelled"
            await anyio.sleep(1.0)  # a measuring window, not a synchronisation
            before = _cpu_s(server.pid)
            await anyio.sleep(1.0)
            used = _cpu_s(server.pid) - before
            assert used < 0.2, f"a cancelled scan still used {used:.2f} s of CPU in 1 s"

            # A scan in flight does not keep the server from stopping on SIGINT.
            await ann.start("repo_audit", {**big, "write_report": False})
            busy = _cpu_s(server.pid)

            async def scanning_again() -> bool:
                return _cpu_s(server.pid) - busy > 0.5

            await eventually(scanning_again, within_s=30, every_s=0.05)
            server.send_signal(signal.SIGINT)
            stopping = time.monotonic()
            with anyio.fail_after(10):
                await server.wait()
            assert time.monotonic() - stopping < 10
