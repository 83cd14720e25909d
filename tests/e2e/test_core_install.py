"""`pip install taskloom` without extras, in a clean virtualenv: it runs a workflow, serves
stdio and HTTP, and a PostgreSQL URL says which extra to install (ADR 0022).

The install resolves the dependencies through pip's configured indexes (and its cache).
When no index can be reached, the test is skipped with pip's reason; any other failure
to install fails it.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from taskloom.persistence.postgres.extra import MISSING
from taskloom.server.dashboard.extra import MISSING_UI
from tests.e2e.test_stdio_server import REPOSITORY
from tests.helpers import free_port, until_http_listening
from tests.server.client import open_client
from tests.server.http_support import ANN, bearer, http_client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

OFFLINE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
)
COUNTDOWN = '{"start": 2, "tick_s": 0}'


def _clean_env(**changes: str) -> dict[str, str]:
    """This process's environment without what points into the development install."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PYTHONPATH", "VIRTUAL_ENV"} and not name.startswith("TASKLOOM_")
    }
    return {**env, **changes}


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh virtualenv holding ``taskloom`` and nothing extra."""
    folder = tmp_path_factory.mktemp("core")
    wheels, venv = folder / "wheels", folder / "venv"

    def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(part) for part in argv],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            env=_clean_env(),
        )

    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, REPOSITORY)
    if built.returncode != 0:
        _skip_if_offline(built)
    (wheel,) = wheels.glob("taskloom-*.whl")
    run(sys.executable, "-m", "venv", venv).check_returncode()
    python = venv / "bin" / "python"
    installed = run(
        python, "-m", "pip", "install", "-q", "--retries", "1", "--timeout", "20", wheel
    )
    if installed.returncode != 0:
        _skip_if_offline(installed)
    return venv / "bin"


def _skip_if_offline(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout + done.stderr
    if any(marker in output for marker in OFFLINE):
        last = output.strip().splitlines()[-1]
        pytest.skip(f"no package index reachable to install the core: {last}")
    pytest.fail(f"pip failed:\n{output}")


def test_the_core_holds_no_postgresql_driver(core: Path) -> None:
    done = subprocess.run(
        [core / "python", "-c", "import psycopg"], capture_output=True, text=True, check=False
    )
    assert "No module named 'psycopg'" in done.stderr


def test_the_core_runs_a_workflow(core: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [core / "taskloom", "run", "countdown", "--input", COUNTDOWN, "--db", "c.db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Completed: task" in done.stdout
    assert json.loads(done.stdout.split("Result:\n", 1)[1]) == {"counted": 2, "lanes": 4}


@pytest.mark.parametrize("command", ["serve", "run countdown", "tasks list", "db migrate"])
def test_a_postgresql_url_names_the_extra(core: Path, tmp_path: Path, command: str) -> None:
    done = subprocess.run(
        [core / "taskloom", *command.split(), "--db", "postgresql://someone@localhost:1/x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(),
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, f"taskloom: error: {MISSING}\n")


async def test_the_core_serves_stdio(core: Path, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=str(core / "taskloom"), args=["serve", "--db", "s.db"], cwd=tmp_path
    )
    with anyio.fail_after(60), (tmp_path / "stderr.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            open_client(*streams) as client,
        ):
            tools = (await client.request("tools/list"))["tools"]
            assert "countdown" in {tool["name"] for tool in tools}
            task_id = await client.start("countdown", {"start": 2, "tick_s": 0})
            result = await client.result(task_id)
    assert result["structuredContent"] == {"counted": 2, "lanes": 4}


async def test_the_core_serves_http(core: Path, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    url = f"http://{address}/mcp"
    env = _clean_env(TASKLOOM_HTTP=address, TASKLOOM_TOKENS=f"ann:{ANN}")
    command = [str(core / "taskloom"), "serve", "--db", str(tmp_path / "h.db")]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(url)
            with anyio.fail_after(60):
                async with http_client(url, ANN) as ann:
                    task_id = await ann.start("countdown", {"start": 2, "tick_s": 0})
                    result = await ann.result(task_id)
                async with httpx2.AsyncClient(timeout=20) as http:
                    ui = await http.get(f"http://{address}/ui/", headers=bearer(ANN))
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()
    assert result["structuredContent"] == {"counted": 2, "lanes": 4}
    assert (ui.status_code, ui.text) == (503, MISSING_UI + "\n")  # no jinja2 in the core
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
