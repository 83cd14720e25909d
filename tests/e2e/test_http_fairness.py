"""One principal cannot take a real `taskloom serve --http` from another: not its
sessions (ann opens 1,000; bob still initializes) and not its worker (ann starts more
long tasks than the worker has slots; bob's one-second task still ends in about a
second). The figures are printed (`pytest -s`) for docs/benchmarks.md."""

import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.helpers import checkout_env, eventually, free_port, until_http_listening
from tests.server.http_support import (
    ANN,
    BOB,
    bearer,
    http_client,
    initialize_body,
    modern_headers,
    modern_request,
)

SESSIONS_PER_PRINCIPAL = 100
"""``HttpSettings.max_sessions_per_principal``'s default."""
WORKER_SLOTS = 100
"""``WorkerSettings.max_runs``'s default."""


@asynccontextmanager
async def _server(tmp_path: Path) -> AsyncIterator[str]:
    """A `taskloom serve --http` process (tokens of ann and bob, no rate limit, the
    ``nap`` workflow) while inside; yields its URL."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    env = checkout_env() | {
        "TASKLOOM_HTTP": url.removeprefix("http://").removesuffix("/mcp"),
        "TASKLOOM_TOKENS": f"ann:{ANN},bob:{BOB}",
        "TASKLOOM_RATE_LIMIT": "0",
        "TASKLOOM_WORKFLOWS": "tests.e2e.nap_flow",
    }
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
    with (tmp_path / "stderr.log").open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(url)
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(30):
                await process.wait()
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


def _json_rpc(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or single-event SSE response."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(
            line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: {")
        )
    message: dict[str, Any] = json.loads(text)
    return message


@pytest.mark.slow
async def test_a_thousand_sessions_of_one_principal_leave_room_for_another(
    tmp_path: Path,
) -> None:
    async with (
        _server(tmp_path) as url,
        httpx2.AsyncClient(timeout=20, limits=httpx2.Limits(max_connections=20)) as http,
    ):
        statuses: list[int] = []
        refusals: list[httpx2.Response] = []

        async def initialize(count: int) -> None:
            for _ in range(count):
                response = await http.post(url, json=initialize_body(), headers=bearer(ANN))
                statuses.append(response.status_code)
                if response.status_code != 200:
                    refusals.append(response)

        started = time.perf_counter()
        with anyio.fail_after(180):
            async with anyio.create_task_group() as group:  # 20 clients of ann at once
                for _ in range(20):
                    group.start_soon(initialize, 50)
        print(f"\n1,000 initialize of one principal: {time.perf_counter() - started:.1f} s")
        assert statuses.count(200) == SESSIONS_PER_PRINCIPAL
        assert statuses.count(429) == 1_000 - SESSIONS_PER_PRINCIPAL
        refusal = refusals[0]
        error = _json_rpc(refusal)["error"]
        assert error["code"] == -32031
        assert "at most 100 per principal" in error["message"]
        assert "bob" not in refusal.text
        assert "ann" not in refusal.text
        with anyio.fail_after(60):
            async with http_client(url, BOB) as bob:  # initialize, then work
                task_id = await bob.start("nap", {"seconds": 0})
                assert (await bob.result(task_id))["isError"] is False


@pytest.mark.slow
async def test_one_principals_long_tasks_do_not_starve_anothers_short_one(
    tmp_path: Path,
) -> None:
    long_tasks = WORKER_SLOTS + 50
    async with _server(tmp_path) as url, httpx2.AsyncClient(timeout=20) as http:

        async def start(token: str, seconds: float) -> str:
            arguments = {"name": "nap", "arguments": {"seconds": seconds}}
            body = modern_request("tools/call", arguments, tasks=True)
            headers = modern_headers(token, "tools/call", "nap")
            created = _json_rpc(await http.post(url, json=body, headers=headers)).get("result")
            assert created is not None, created
            assert created["resultType"] == "task", created
            task_id: str = created["taskId"]
            return task_id

        async def status(token: str, task_id: str) -> str:
            body = modern_request("tasks/get", {"taskId": task_id}, tasks=True)
            headers = modern_headers(token, "tasks/get", task_id)
            answered: str = _json_rpc(await http.post(url, json=body, headers=headers))["result"][
                "status"
            ]
            return answered

        with anyio.fail_after(120):
            for _ in range(long_tasks):
                await start(ANN, 60)

            metrics = url.removesuffix("/mcp") + "/metrics"
            running = f'taskloom_runs_in_progress{{workflow="nap"}} {WORKER_SLOTS // 2}'

            async def ann_holds_her_share() -> bool:  # half the slots; the rest queue
                return running in (await http.get(metrics, headers=bearer(ANN))).text

            await eventually(ann_holds_her_share, within_s=30, every_s=0.1)
            started = time.perf_counter()
            bob_task = await start(BOB, 1)

            async def bob_done() -> bool:
                return await status(BOB, bob_task) == "completed"

            await eventually(bob_done, within_s=30, every_s=0.05)
            took_s = time.perf_counter() - started
        print(f"\nbob's 1 s task beside {long_tasks} of ann's 60 s tasks: {took_s:.2f} s")
        assert took_s < 1 + 4  # about its duration; unfair claims would take 60 s
