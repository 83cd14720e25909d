"""The workload the bench runs against every MCP server, through a :class:`BenchClient`.

Each function measures one thing on an open connection: creations per second, `tasks/get`
latency, time from `tools/call` to a `completed` status, time from `tasks/cancel` to a
`cancelled` status, a `tasks/list` page, and whether a task survives SIGKILL.
"""

import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcp_client import TERMINAL, BenchClient

Connect = Callable[[], AbstractAsyncContextManager[BenchClient]]


async def creations(client: BenchClient, count: int, concurrency: int) -> tuple[float, list[str]]:
    """Trivial tasks created per second by *concurrency* callers in flight; their ids."""
    ids: list[str] = []
    per_caller = max(count // concurrency, 1)

    async def caller() -> None:
        for _ in range(per_caller):
            ids.append(await client.start("noop"))  # noqa: PERF401  # one at a time

    started = time.perf_counter()
    async with anyio.create_task_group() as task_group:
        for _ in range(concurrency):
            task_group.start_soon(caller)
    return len(ids) / (time.perf_counter() - started), ids


async def latencies(call: Callable[[], Awaitable[Any]], samples: int) -> list[float]:
    """Milliseconds taken by each of *samples* sequential awaits of *call*."""
    found: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        await call()
        found.append((time.perf_counter() - started) * 1000)
    return found


async def drain(client: BenchClient, ids: list[str]) -> None:
    """Wait until every task in *ids* has ended (so reads are not measured under a backlog)."""
    for task_id in ids:
        await client.until(task_id)


async def gets(client: BenchClient, ids: list[str], samples: int) -> list[float]:
    """`tasks/get` latencies (ms) over *ids* in turn."""
    cycle = iter(ids * (samples // max(len(ids), 1) + 1))
    return await latencies(lambda: client.get(next(cycle)), samples)


async def call_to_completed(client: BenchClient, samples: int) -> list[float]:
    """Milliseconds from sending `tools/call` to a `tasks/get` showing `completed`."""

    async def one() -> None:
        status = await client.until(await client.start("noop"))
        if status != "completed":
            raise RuntimeError(f"the trivial task ended {status}")

    return await latencies(one, samples)


async def cancel_to_cancelled(client: BenchClient, samples: int, settle_s: float) -> list[float]:
    """Milliseconds from sending `tasks/cancel` on a sleeping task to `cancelled`.

    Each task is given *settle_s* to be picked up and start sleeping before the cancel.
    """
    found: list[float] = []
    for _ in range(samples):
        task_id = await client.start("hold", {"seconds": 600})
        await anyio.sleep(settle_s)
        started = time.perf_counter()
        await client.cancel(task_id)
        status = await client.until(task_id)
        found.append((time.perf_counter() - started) * 1000)
        if status != "cancelled":
            raise RuntimeError(f"the cancelled task ended {status}")
    return found


async def list_pages(client: BenchClient, samples: int) -> tuple[list[float], int]:
    """`tasks/list` latencies (ms) of the second page (a cursor page); its size."""
    first = await client.list_page()
    cursor = first.get("nextCursor")
    if cursor is None:
        raise RuntimeError("tasks/list answered a single page")
    size = len((await client.list_page(cursor))["tasks"])
    return await latencies(lambda: client.list_page(cursor), samples), size


async def survives_kill(connect: Connect, settle_s: float) -> str:
    """Start a sleeping task, SIGKILL the server, start it again: what `tasks/get` says."""
    async with connect() as client:
        task_id = await client.start("hold", {"seconds": 600})
        await anyio.sleep(settle_s)
        await client.get(task_id)
        client.kill()
    async with connect() as again:
        try:
            answer = await again.get(task_id)
        except Exception as error:  # noqa: BLE001  # any error means the task is gone
            return f"lost ({type(error).__name__}: {error})"
        return f"kept ({answer['status']})"


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of *pid* and every live process descended from it.

    ``/proc/PID/stat`` counts every thread of a process, those that have exited
    included; descendants are found by their parent ids (a worker process or a helper
    pool counts too).
    """
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone between the listing and the read
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    total, tree = 0.0, {pid}
    for child, parent in sorted(parents.items()):
        if parent in tree:
            tree.add(child)
    for member in tree:
        total += times.get(member, 0.0)
    return total


async def until_idle(pid: int, limit_s: float = 60.0) -> None:
    """Wait until the server has used less than 1% of a core over 0.2 s."""
    with anyio.fail_after(limit_s):
        before = process_cpu_s(pid)
        while True:
            await anyio.sleep(0.2)
            now = process_cpu_s(pid)
            if now - before <= 0.002:
                return
            before = now


@dataclass(frozen=True)
class CpuPerTask:
    """Server CPU per trivial task (create, run, one ``tasks/get``), and what it took."""

    cpu_ms: float
    tasks: int
    extra_gets: int
    wall_s: float


async def cpu_per_task(client: BenchClient, count: int, concurrency: int) -> CpuPerTask:
    """Server CPU (ms) per task: *count* creates of ``noop`` with *concurrency* in flight,
    each task run to its end, then one ``tasks/get`` per task (again *concurrency* in
    flight). The ends are awaited by watching the server's CPU go idle, not by polling,
    so each task costs exactly one read unless it has not ended by then (counted).
    """
    await until_idle(client.pid)
    started, before = time.perf_counter(), process_cpu_s(client.pid)
    _, ids = await creations(client, count, concurrency)
    await until_idle(client.pid)
    pending = list(ids)
    unfinished: list[str] = []

    async def reader() -> None:
        while pending:
            task_id = pending.pop()
            if (await client.get(task_id))["status"] not in TERMINAL:
                unfinished.append(task_id)

    async with anyio.create_task_group() as task_group:
        for _ in range(concurrency):
            task_group.start_soon(reader)
    extra = 0
    for task_id in unfinished:
        await client.until(task_id)
        extra += 1
    idle_s = 0.2  # the last idle check, a quiet 0.2 s counted in the window
    spent = process_cpu_s(client.pid) - before
    wall = time.perf_counter() - started - idle_s
    return CpuPerTask(spent * 1000 / len(ids), len(ids), extra, wall)
