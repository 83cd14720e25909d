"""The workload the bench runs against every MCP server, through a :class:`BenchClient`.

Each function measures one thing on an open connection: creations per second, `tasks/get`
latency, time from `tools/call` to a `completed` status, time from `tasks/cancel` to a
`cancelled` status, a `tasks/list` page, and whether a task survives SIGKILL.
"""

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from mcp_client import BenchClient

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
