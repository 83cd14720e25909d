"""A workflow whose one node body writes a line to a ledger as it starts and as it ends
(``start|end <task id> <attempt> <pid> <time>``, each one ``O_APPEND`` write), so a test
can tell whether two bodies of one run ever overlapped, in one process or across
processes sharing the database."""

import os
import time

import anyio
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow


class LedgerInput(BaseModel):
    """Where the ledger is, a number to double, and how long the body runs."""

    ledger: str
    n: int
    body_s: float = 0.3


ledger = Workflow("ledger", version="1", input=LedgerInput)


def _write(path: str, kind: str, task_id: str, attempt: int) -> None:
    line = f"{kind} {task_id} {attempt} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@ledger.node()
async def body(ctx: NodeContext[LedgerInput]) -> int:
    _write(ctx.input.ledger, "start", ctx.task_id, ctx.attempt)
    try:
        await anyio.sleep(ctx.input.body_s)
    finally:
        _write(ctx.input.ledger, "end", ctx.task_id, ctx.attempt)
    return ctx.input.n * 2


def overlaps(text: str) -> list[str]:
    """The task ids of the ledger *text* whose bodies ever ran two at once."""
    events: dict[str, list[tuple[float, int]]] = {}
    for line in text.splitlines():
        kind, task_id, _attempt, _pid, at = line.split()
        events.setdefault(task_id, []).append((float(at), 1 if kind == "start" else -1))
    found = []
    for task_id, marks in events.items():
        running = 0
        for _, step in sorted(marks, key=lambda mark: (mark[0], mark[1])):
            running += step
            if running > 1:
                found.append(task_id)
                break
    return found
