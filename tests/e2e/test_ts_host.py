"""A TypeScript-SDK plain host (tests/ts_host/host.cjs: MCP Inspector, Cursor and Claude
Desktop call tools through this client) follows a long job through the calls the answers
recommend, and nothing else (ADR 0040): no request outlives the host's timeout, no answer
is an error or fails the SDK's output-schema check, and the structured result arrives.

The real host gives up after 60 s and taskloom's first call waits 45 s; in the suite the
same ratio runs scaled down (a 6 s host timeout, plain_wait_s 4.5, a job three times
longer than the timeout). ``TASKLOOM_FULL_SCALE_HOST=1`` runs the full-scale case: the
SDK's default timeout, the default plain_wait_s, a 3-minute job.

Needs Node and the SDK that ``scripts/ensure-ts-host.sh`` installs into ``.ts-host/``
(``make test`` runs it); without them these tests skip, saying why.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import checkout_env

REPOSITORY = Path(__file__).resolve().parents[2]
TS_HOST_DIR = Path(os.environ.get("TS_HOST_DIR", REPOSITORY / ".ts-host"))
HOST = REPOSITORY / "tests" / "ts_host" / "host.cjs"
NODE = shutil.which("node")
FULL_SCALE = os.environ.get("TASKLOOM_FULL_SCALE_HOST") == "1"

pytestmark = pytest.mark.skipif(
    NODE is None or not (TS_HOST_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir(),
    reason="no node, or no TypeScript MCP SDK in .ts-host/ (run scripts/ensure-ts-host.sh)",
)


def _host(
    tmp_path: Path,
    *,
    tool: str,
    arguments: dict[str, Any],
    timeout_s: float | None,
    plain_wait_s: float | None,
    scenario: str = "",
    within_s: float = 100,
) -> dict[str, Any]:
    """Run the TypeScript host against `taskloom serve` on a fresh database; its report."""
    server_env = checkout_env({}, TASKLOOM_LINGER="0")
    if plain_wait_s is not None:
        server_env["TASKLOOM_PLAIN_WAIT_S"] = str(plain_wait_s)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TS_HOST_DIR": str(TS_HOST_DIR),
        "SERVER_COMMAND": json.dumps(
            [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
        ),
        "SERVER_ENV": json.dumps(server_env),
        "TOOL": tool,
        "ARGUMENTS": json.dumps(arguments),
        "SCENARIO": scenario,
    }
    if timeout_s is not None:
        env["TIMEOUT_MS"] = str(int(timeout_s * 1000))
    assert NODE is not None
    done = subprocess.run(
        [NODE, str(HOST)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=within_s,
        check=True,
    )
    assert "Traceback" not in done.stderr, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert "error" not in report, report
    return report


def _follows_to_the_end(report: dict[str, Any], timeout_s: float, counted: int) -> None:
    """Every call answered in time and as no error; the job's structured result at the end."""
    calls = report["calls"]
    assert report["outputSchemas"] == []  # a plain host is shown none: nothing to fail
    assert calls[0]["name"] == "countdown"
    assert calls[0]["isError"] is False
    assert calls[0]["meta"]["taskloom/task"]["deferred"] is True
    assert len(calls) >= 3  # deferred, then at least two follow-ups
    for call in calls:
        assert "exception" not in call, call
        assert call["seconds"] < timeout_s, call
        assert call["isError"] is False, call
    final = report["final"]
    assert final["name"] == "task_result"
    assert final["structuredContent"] == {"counted": counted, "lanes": 4}


@pytest.mark.slow
def test_a_typescript_host_follows_a_job_three_times_its_timeout(tmp_path: Path) -> None:
    report = _host(
        tmp_path,
        tool="countdown",
        arguments={"start": 288, "tick_s": 0.25},  # 72 numbers a lane at 4 a second: 18 s
        timeout_s=6,
        plain_wait_s=4.5,  # 45/60 of the host's timeout, as by default
    )
    _follows_to_the_end(report, 6, 288)
    assert report["closeSeconds"] < 5  # the server leaves with its host


@pytest.mark.slow
@pytest.mark.skipif(not FULL_SCALE, reason="full scale (3 minutes): TASKLOOM_FULL_SCALE_HOST=1")
@pytest.mark.timeout(400)
def test_full_scale_a_typescript_host_follows_a_three_minute_job(tmp_path: Path) -> None:
    report = _host(
        tmp_path,
        tool="countdown",
        arguments={"start": 720, "tick_s": 1.0},  # 180 numbers a lane at 1 a second: 3 min
        timeout_s=None,  # the SDK's default: 60 s
        plain_wait_s=None,  # taskloom's default: 45 s
        within_s=360,
    )
    _follows_to_the_end(report, 60, 720)
    durations = [round(call["seconds"], 1) for call in report["calls"]]
    print(f"full scale: {len(durations)} calls, seconds each: {durations}")


@pytest.mark.slow
def test_two_identical_calls_make_one_task(tmp_path: Path) -> None:
    report = _host(
        tmp_path,
        tool="countdown",
        arguments={"start": 48, "tick_s": 0.25},  # 3 s
        timeout_s=5,
        plain_wait_s=1,
        scenario="twice",
    )
    first, second = report["calls"][:2]
    assert second["isError"] is False
    assert second["meta"]["taskloom/task"]["taskId"] == first["meta"]["taskloom/task"]["taskId"]
    assert second["meta"]["taskloom/task"]["joined"] is True
    assert "This call joined it" in second["text"]
    _follows_to_the_end(report, 5, 48)


@pytest.mark.slow
def test_an_idempotency_key_from_a_typescript_host(tmp_path: Path) -> None:
    report = _host(
        tmp_path,
        tool="countdown",
        arguments={"start": 48, "tick_s": 0.25},
        timeout_s=5,
        plain_wait_s=1,
        scenario="key",
    )
    first, again, other = report["calls"][:3]
    task_id = first["meta"]["taskloom/task"]["taskId"]
    assert again["meta"]["taskloom/task"]["taskId"] == task_id
    assert again["meta"]["taskloom/task"]["joined"] is True
    assert other["isError"] is True  # the same key with other arguments
    assert f"idempotency key 'ts-job-1' was already used for task {task_id}" in other["text"]
    assert report["final"]["structuredContent"] == {"counted": 48, "lanes": 4}


@pytest.mark.slow
def test_a_wait_of_10000_s_is_cut_to_what_the_host_can_wait(tmp_path: Path) -> None:
    report = _host(
        tmp_path,
        tool="countdown",
        arguments={"start": 96, "tick_s": 0.25},  # 6 s
        timeout_s=5,
        plain_wait_s=1,
        scenario="wait",
    )
    long_wait = report["calls"][1]
    assert long_wait["arguments"]["wait_s"] == 10000
    assert "exception" not in long_wait
    assert long_wait["isError"] is False
    assert long_wait["text"].startswith(
        "wait_s 10000 is more than this server waits: waited at most 1 s"
    )
    assert long_wait["seconds"] < 5
    _follows_to_the_end(report, 5, 96)
