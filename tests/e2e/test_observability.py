"""`--log-format json` on `serve --http` and `worker`: JSON log lines, and `/metrics` (on
`serve --http`, and on `worker --metrics HOST:PORT`)."""

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest

from taskloom.commands.common import open_database, open_store
from taskloom.engine.submit import submit
from taskloom.workflows.countdown import countdown
from tests.helpers import checkout_env, eventually, free_port
from tests.observability.scrape import value
from tests.server.http_support import ANN, BOB, http_client


@pytest.mark.slow
async def test_metrics_and_json_logs_of_a_served_workflow(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    url, metrics_url = f"http://{address}/mcp", f"http://{address}/metrics"
    env = checkout_env() | {
        "TASKLOOM_TOKENS": f"ann:{ANN},bob:{BOB}",
        "TASKLOOM_LOG_FORMAT": "json",
    }
    command = [
        *(sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")),
        *("--http", address, "--log-level", "debug"),
    ]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            async with httpx2.AsyncClient(timeout=5) as http:

                async def listening() -> bool:
                    try:
                        return (await http.get(metrics_url)).status_code == 401
                    except httpx2.TransportError:
                        return False

                await eventually(listening, within_s=30, every_s=0.05)
                with anyio.fail_after(60):
                    async with http_client(url, ANN) as ann:
                        task_id = await ann.start("countdown", {"start": 3, "tick_s": 0})
                        await ann.result(task_id)
                        failing = await ann.start("countdown", {"start": 3, "fail_at": 2})
                        await ann.result(failing)
                bearer = {"Authorization": f"Bearer {BOB}"}
                scraped = await http.get(metrics_url, headers=bearer)
                posted = await http.post(metrics_url, headers=bearer)
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert posted.status_code == 405
    text = scraped.text  # parsed by prometheus_client's own parser
    countdown = {"workflow": "countdown"}
    assert value(text, "taskloom_tasks_created_total", **countdown) == 2
    assert value(text, "taskloom_tasks_finished_total", **countdown, state="completed") == 1
    assert value(text, "taskloom_tasks_finished_total", **countdown, state="failed") == 1
    assert value(text, "taskloom_task_duration_seconds_count", **countdown, state="failed") == 1
    assert 'taskloom_node_errors_total{error_type="RuntimeError",workflow="countdown"}' in text
    assert "taskloom_node_attempt_duration_seconds_bucket{" in text
    # a run ends (lease released) just after its result is readable: 1 or already 0
    assert value(text, "taskloom_runs_in_progress", **countdown) in (0, 1)
    assert value(text, "process_cpu_seconds_total") is not None  # the library's own

    log = (tmp_path / "stderr.log").read_text()
    assert ANN not in log
    assert BOB not in log
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    created = [line for line in lines if line["message"] == "task created"]
    assert {line["task_id"] for line in created} == {task_id, failing}
    finished = {line["task_id"]: line for line in lines if line["message"] == "task finished"}
    assert finished[task_id]["outcome"] == "completed"
    assert finished[failing]["outcome"] == "failed"
    assert any(line["message"] == "node attempt failed" for line in lines)


@pytest.mark.slow
async def test_a_json_worker_writes_only_json_lines(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    async with open_store(db, create=True):
        pass  # created and migrated
    env = checkout_env()
    command = [sys.executable, "-m", "taskloom", "worker", "--db", str(db)]
    command += ["--log-format", "json", "--log-level", "info"]
    errlog_path = tmp_path / "stderr.log"
    with errlog_path.open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:

            async def started() -> bool:
                return "runs:" in errlog_path.read_text()

            await eventually(started, within_s=30, every_s=0.05)
            async with open_database(db) as local:
                task = await submit(local.manager, countdown, {"start": 4, "tick_s": 0})
                with anyio.fail_after(30):
                    done = await local.manager.wait_until_terminal(task.id, recheck_every=0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                await process.wait()
    assert done.result == {"counted": 4, "lanes": 4}
    lines = [json.loads(line) for line in errlog_path.read_text().splitlines()]
    assert lines[0]["logger"] == "taskloom.commands.worker"
    assert lines[0]["workflows"][:2] == ["countdown", "repo_audit"]
    [ended] = [line for line in lines if line["message"] == "run ended"]
    assert (ended["task_id"], ended["outcome"]) == (task.id, "completed")
    attempts = [line for line in lines if line["message"] == "node attempt ended"]
    assert {line["node"] for line in attempts} >= {"plan", "report"}
    assert any(line.get("signal") == "SIGTERM" for line in lines)


@pytest.mark.slow
async def test_a_worker_serves_its_metrics_when_asked(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    async with open_store(db, create=True):
        pass  # created and migrated
    env = checkout_env()
    command = [sys.executable, "-m", "taskloom", "worker", "--db", str(db)]
    command += ["--metrics", "127.0.0.1:0"]
    errlog_path = tmp_path / "stderr.log"
    with errlog_path.open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            url = ""

            async def announced() -> bool:
                nonlocal url
                found = re.search(r"metrics at (http://\S+/metrics)", errlog_path.read_text())
                url = found.group(1) if found else ""
                return bool(found)

            await eventually(announced, within_s=30, every_s=0.05)
            async with open_database(db) as local:
                task = await submit(local.manager, countdown, {"start": 3, "tick_s": 0})
                with anyio.fail_after(30):
                    await local.manager.wait_until_terminal(task.id, recheck_every=0.05)
            async with httpx2.AsyncClient(timeout=5) as http:
                finished = "taskloom_tasks_finished_total"
                scraped = ""

                async def counted() -> bool:  # the worker counts just after it commits
                    nonlocal scraped
                    scraped = (await http.get(url)).text
                    labels = {"workflow": "countdown", "state": "completed"}
                    return value(scraped, finished, **labels) == 1

                await eventually(counted, within_s=10, every_s=0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                await process.wait()
    assert process.returncode == 0
    attempts = "taskloom_node_attempts_total"
    assert value(scraped, attempts, workflow="countdown", phase="plan", outcome="completed") == 1
    assert value(scraped, "process_resident_memory_bytes")
    assert value(scraped, "python_gc_collections_total", generation="0") is not None


def test_a_bad_metrics_address_is_one_line(tmp_path: Path) -> None:
    env = checkout_env()
    command = [sys.executable, "-m", "taskloom", "worker", "--db", str(tmp_path / "w.db")]
    refused = [*command, "--metrics", "9464"]
    done = subprocess.run(refused, check=False, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "taskloom: error: --metrics wants HOST:PORT, e.g. 127.0.0.1:9464, not '9464'"
    ]
    assert not (tmp_path / "w.db").exists()  # refused before anything was opened
