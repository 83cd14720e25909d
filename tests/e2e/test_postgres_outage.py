"""Two ``taskloom serve --http`` processes on one private PostgreSQL cluster, both
creating tasks, while the cluster is stopped fast, crashed (``-m immediate``) and stopped fast again
(ADR 0038).

Checked: no run's body ever ran twice at once (a ledger of body starts and ends, across
both processes); every acknowledged task completed with its result; during the outage a
create was answered HTTP 503 with ``Retry-After`` and ``-32032``; each process logged the
outage in a few lines (one WARNING when the database went, an INFO when it came back),
no traceback, and at most 12 lines at WARNING or above over the three outages.
"""

import json
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.persistence.postgres import PostgresSettings, store_class
from tests.e2e.ledger_flow import overlaps
from tests.helpers import checkout_env, eventually, free_port
from tests.private_postgres import PrivateCluster, private_cluster
from tests.server.http_support import modern_request

FLOW = str(Path(__file__).with_name("ledger_flow.py"))
MODERN = "2026-07-28"


class Creator:
    """Creates ``ledger`` tasks on one server until told to stop; remembers what it saw."""

    def __init__(self, url: str, ledger: Path) -> None:
        self.url = url
        self.ledger = ledger
        self.acknowledged: dict[str, int] = {}
        self.refusals: list[tuple[int, str | None, dict[str, Any]]] = []
        self.other: list[str] = []
        self.running = True

    async def run(self) -> None:
        n = 0
        async with httpx2.AsyncClient(timeout=30) as http:
            while self.running:
                n += 1
                await self._create(http, n)
                await anyio.sleep(0.05)

    async def _create(self, http: httpx2.AsyncClient, n: int) -> None:
        arguments = {"ledger": str(self.ledger), "n": n, "body_s": 0.3}
        call = modern_request(
            "tools/call", {"name": "ledger", "arguments": arguments}, n, tasks=True
        )
        headers = {
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "ledger",
        }
        try:
            answer = await http.post(self.url, json=call, headers=headers)
        except httpx2.TransportError as error:
            self.other.append(f"transport: {error!r}")
            return
        body = _reply(answer.text)
        if answer.status_code == 200 and "result" in body:
            task_id = _task_id(body["result"])
            if task_id is not None:
                self.acknowledged[task_id] = n
                return
        if answer.status_code == 503:
            self.refusals.append((503, answer.headers.get("retry-after"), body))
            return
        self.other.append(f"{answer.status_code}: {answer.text[:300]}")


def _reply(text: str) -> dict[str, Any]:
    for line in [text, *(line.removeprefix("data:") for line in text.splitlines())]:
        try:
            found = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def _task_id(result: dict[str, Any]) -> str | None:
    task = result.get("task")
    if isinstance(task, dict) and isinstance(task.get("taskId"), str):
        return str(task["taskId"])
    found = result.get("taskId")
    return found if isinstance(found, str) else None


async def _listening(url: str) -> None:
    async with httpx2.AsyncClient(timeout=5) as http:

        async def answers() -> bool:
            try:
                await http.post(url, json={})
            except httpx2.TransportError:
                return False
            return True

        await eventually(answers, within_s=30, every_s=0.05)


async def _outage(cluster: PrivateCluster, stop: str, seconds: float) -> None:
    await anyio.to_thread.run_sync(cluster.stop if stop == "fast" else cluster.crash)
    await anyio.sleep(seconds)  # the outage itself: its length is the point
    await anyio.to_thread.run_sync(cluster.start)


@pytest.mark.slow
async def test_two_servers_ride_out_fast_and_immediate_stops(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ports = [free_port(), free_port()]
    with private_cluster() as cluster:
        env = checkout_env(TASKLOOM_STORE_WAIT_S="2")
        logs = [tmp_path / f"server{index}.log" for index in range(2)]
        processes = []
        try:
            for port, log in zip(ports, logs, strict=True):
                command = [
                    sys.executable, "-m", "taskloom", "serve", "--db", cluster.url,
                    "--http", f"127.0.0.1:{port}", "--workflows", FLOW,
                    "--log-level", "info", "--log-format", "json",
                ]  # fmt: skip
                with log.open("w") as sink:
                    processes.append(
                        await anyio.open_process(command, env=env, stdout=sink, stderr=sink)
                    )
            urls = [f"http://127.0.0.1:{port}/mcp" for port in ports]
            for url in urls:
                await _listening(url)
            creators = [Creator(url, ledger) for url in urls]
            with anyio.fail_after(100):
                async with anyio.create_task_group() as task_group:
                    for creator in creators:
                        task_group.start_soon(creator.run)
                    await anyio.sleep(1)  # load before the first outage
                    await _outage(cluster, "fast", 3)
                    await anyio.sleep(1.5)
                    await _outage(cluster, "immediate", 3)
                    await anyio.sleep(1.5)
                    await _outage(cluster, "fast", 3)
                    await anyio.sleep(1.5)
                    for creator in creators:
                        creator.running = False
                acknowledged = {
                    task_id: n
                    for creator in creators
                    for task_id, n in creator.acknowledged.items()
                }
                ended = await _all_ended(cluster.url, acknowledged)
        finally:
            for process in processes:
                process.send_signal(signal.SIGINT)
            with anyio.fail_after(30):
                for process in processes:
                    await process.wait()

    assert len(acknowledged) > 20
    assert overlaps(ledger.read_text()) == []
    wrong = {
        task_id: (task.state, task.result)
        for task_id, task in ended.items()
        if task.state is not TaskState.COMPLETED or task.result != acknowledged[task_id] * 2
    }
    assert not wrong
    refusals = [refusal for creator in creators for refusal in creator.refusals]
    assert refusals, [creator.other for creator in creators]
    for status, retry_after, body in refusals:
        assert (status, body["error"]["code"]) == (503, -32032), body
        assert retry_after == "2"
        data = dict(body["error"]["data"])
        assert data.pop("outcome", "unknown") == "unknown"  # a commit cut by the crash
        assert data == {"reason": "store_unavailable", "retryable": True, "retryAfterSeconds": 2}
    for log in logs:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        text = log.read_text()
        assert "Traceback" not in text
        loud = [line for line in lines if line["level"] in ("warning", "error", "critical")]
        assert len(loud) <= 12, [line["message"] for line in loud]
        went = [line for line in loud if " is unavailable (" in line["message"]]
        back = [line for line in lines if "is back after an outage of" in line["message"]]
        assert len(went) == 3, [line["message"] for line in loud]
        assert len(back) == 3, [line["message"] for line in lines if line["level"] == "info"][-20:]


async def _all_ended(url: str, acknowledged: dict[str, int]) -> dict[str, Any]:
    """Every acknowledged task, once all have ended (bounded by the caller)."""
    settings = PostgresSettings(url=url)
    async with store_class().open(settings) as store:
        manager = TaskManager(store)
        while True:
            tasks = {task_id: await manager.get(task_id) for task_id in acknowledged}
            if all(task.is_terminal for task in tasks.values()):
                return tasks
            await anyio.sleep(0.2)  # other processes' work: no event here
