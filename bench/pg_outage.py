"""Recovery after a PostgreSQL outage: how long after the server is back do creates and
runs go on (ADR 0038; target: within 1 s, whatever the outage's length).

One ``taskloom serve --http`` process on a private cluster of its own (initdb in a
temporary folder, as ``tests/private_postgres.py`` makes it), four clients creating
``ledger`` tasks one after another (a node body of 0.3 s that writes its start and end to
a ledger file), and a few longer runs in flight. The cluster is stopped (``pg_ctl -m
fast``) for 10 s, then for 40 s, and started again; ``pg_ctl start -w`` returns once the
server accepts connections, and that is time zero. Measured from it:

- *create*: until the first create acknowledged after it;
- *run*: until the first node body that starts after it (a run dropped during the
  outage, resumed, or one created since).

    python bench/pg_outage.py        # print the figures
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import anyio
import httpx2

import figures

BENCH: Final = Path(__file__).resolve().parent
REPOSITORY: Final = BENCH.parent
FLOW: Final = REPOSITORY / "tests" / "e2e" / "ledger_flow.py"
MODERN: Final = "2026-07-28"
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
CREATORS: Final = 4


def _cluster_tools() -> Any:
    sys.path.insert(0, str(REPOSITORY))
    from tests import private_postgres  # the tests' throwaway cluster

    return private_postgres


def _request(n: int, ledger: Path, body_s: float) -> dict[str, Any]:
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    }
    arguments = {"ledger": str(ledger), "n": n, "body_s": body_s}
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "ledger", "arguments": arguments, "_meta": envelope},
    }


HEADERS: Final = {
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": MODERN,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "ledger",
}


class Clients:
    """Clients creating tasks one after another until stopped; the time of each ack."""

    def __init__(self, url: str, ledger: Path) -> None:
        self.url = url
        self.ledger = ledger
        self.acks: list[float] = []
        self.running = True
        self._n = 0

    async def create(self, body_s: float = 0.3) -> bool:
        self._n += 1
        async with httpx2.AsyncClient(timeout=60) as http:
            try:
                answer = await http.post(
                    self.url, json=_request(self._n, self.ledger, body_s), headers=HEADERS
                )
            except httpx2.TransportError:
                return False
        if answer.status_code == 200 and '"result"' in answer.text:
            self.acks.append(time.monotonic())
            return True
        return False

    async def run(self) -> None:
        while self.running:
            if not await self.create():
                await anyio.sleep(0.05)  # refused at once (503): do not spin
            await anyio.sleep(0.02)


def _starts_after(ledger: Path, wall: float) -> float | None:
    """The first node-body start in *ledger* at or after *wall* (``time.time()``)."""
    found = [
        float(line.split()[4])
        for line in ledger.read_text().splitlines()
        if line.startswith("start ") and float(line.split()[4]) >= wall
    ]
    return min(found) if found else None


async def _one_outage(outage_s: float) -> tuple[float, float]:
    tools = _cluster_tools()
    from tests.helpers import free_port  # importable once _cluster_tools put the repo on the path

    with tools.private_cluster() as cluster, tempfile.TemporaryDirectory() as folder:
        ledger = Path(folder) / "ledger"
        ledger.touch()
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        env = {**os.environ, "PYTHONPATH": f"{REPOSITORY / 'src'}:{REPOSITORY}"}
        command = [
            sys.executable, "-m", "taskloom", "serve", "--db", cluster.url,
            "--http", f"127.0.0.1:{port}", "--workflows", str(FLOW),
        ]  # fmt: skip
        log = Path(folder) / "server.log"
        with log.open("w") as sink:
            server = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)  # noqa: ASYNC220
        try:
            clients = Clients(url, ledger)
            with anyio.fail_after(30):
                while not await clients.create():  # noqa: ASYNC110  # another process
                    await anyio.sleep(0.1)  # not listening yet
            async with anyio.create_task_group() as task_group:
                for _ in range(CREATORS):
                    task_group.start_soon(clients.run)
                for _ in range(3):
                    await clients.create(body_s=outage_s + 5)  # in flight through the outage
                await anyio.sleep(1)
                await anyio.to_thread.run_sync(cluster.stop)
                await anyio.sleep(outage_s)
                await anyio.to_thread.run_sync(cluster.start)
                back, back_wall = time.monotonic(), time.time()
                with anyio.fail_after(60):
                    while not any(ack >= back for ack in clients.acks):  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # sampled every 10 ms
                    while _starts_after(ledger, back_wall) is None:  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # another process's ledger
                clients.running = False
                task_group.cancel_scope.cancel()
            create_s = min(ack for ack in clients.acks if ack >= back) - back
            run_s = (_starts_after(ledger, back_wall) or back_wall) - back_wall
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    return create_s, run_s


def run(quick: bool) -> list[figures.Row]:
    """Recovery after outages of 10 s and 40 s (1 s and 2 s with *quick*), in seconds."""
    rows: list[figures.Row] = []
    for outage_s in (1.0, 2.0) if quick else (10.0, 40.0):
        creates: list[float] = []
        runs: list[float] = []
        for _ in range(1 if quick else 3):
            create_s, run_s = anyio.run(_one_outage, outage_s)
            creates.append(create_s)
            runs.append(run_s)
        rows.append(
            figures.row(
                f"first create acknowledged after a {outage_s:g} s outage", creates, "s", "< 1"
            )
        )
        rows.append(
            figures.row(f"first node body started after a {outage_s:g} s outage", runs, "s", "< 1")
        )
    return rows


if __name__ == "__main__":
    for found in run(quick="--quick" in sys.argv):
        print(found)
