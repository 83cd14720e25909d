"""`make demo`: durable MCP tasks end to end, through a real `taskloom serve` process.

The demo starts the server as a child process on ./demo-data/taskloom.db and drives it
with the MCP Python client (protocol 2025-11-25, task-augmented tool calls). It audits
this project's source tree with a live progress bar, cancels a slow run in the middle of
a phase, then kills the server with SIGKILL in the middle of a third run, restarts it and
shows the run finishing from its checkpoint. ``--quick`` (or ``TASKLOOM_DEMO_QUICK=1``)
uses shorter runs, for CI.
"""

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
from demo_client import McpClient, serve, structured
from mcp.shared.exceptions import MCPError

import taskloom
from taskloom.commands.common import open_database
from taskloom.commands.progress_view import bar
from taskloom.commands.render import table
from taskloom.engine.models import TaskId

DATA = Path("demo-data")
POLL_S = 0.05
"""How often the demo polls ``tasks/get`` (a real client would use ``pollInterval``)."""
WAIT_S = 60.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Pace:
    """How long the countdowns take: 4 lanes count ``start / 4`` numbers each."""

    start: int
    tick_s: float


def _source_tree() -> Path:
    """This project's ``src/`` (or the installed package when there is no checkout)."""
    package = Path(taskloom.__file__).resolve().parent
    return package.parent if package.parent.name == "src" else package


_STATUS = re.compile(r"^phase (\d+)/(\d+) [^:]+: ([\d,.]+)/([\d,.]+)")


def overall_from_status(message: str) -> float | None:
    """A fraction from an MCP status message (``phase 2/3 count: 12/40 numbers``): an MCP
    client sees only this text (the command line reads the stored progress instead)."""
    found = _STATUS.match(message)
    if found is None:
        return None
    number, phases, done, total = (float(part.replace(",", "")) for part in found.groups())
    within = min(done / total, 1.0) if total else 0.0
    return min((number - 1 + within) / phases, 1.0)


class Screen:
    """Progress as one line redrawn in place on a terminal, or a line per change."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self._last = ""

    def progress(self, status: dict[str, Any]) -> None:
        message = status.get("statusMessage", "")
        fraction = 1.0 if status["status"] == "completed" else overall_from_status(message)
        said = f": {message}" if message else ""
        line = f"   {bar(fraction or 0.0)} {fraction or 0.0:4.0%}  {status['status']}{said}"
        if line == self._last:
            return
        self._last = line
        if self._live:
            self._stream.write("\r\x1b[2K" + line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def done(self) -> None:
        if self._live and self._last:
            self._stream.write("\n")
        self._last = ""


async def poll(client: McpClient, task_id: str, screen: Screen, until: str | None = None) -> str:
    """Poll ``tasks/get``, drawing progress, until the task ends (or its status message
    starts with *until* and shows some progress); return the last status message."""
    with anyio.fail_after(WAIT_S):
        while True:
            status = await client.get(task_id)
            screen.progress(status)
            message: str = status.get("statusMessage", "")
            if status["status"] in TERMINAL:
                break
            if (
                until is not None
                and message.startswith(until)
                and not message.startswith(f"{until} 0/")
            ):
                break
            await anyio.sleep(POLL_S)
    screen.done()
    return message


async def node_report(db: Path, task_id: str) -> list[str]:
    """Each node of the task, from the database: its state and how its attempts ended."""
    async with open_database(db) as local:
        nodes = await local.runs.checkpoints(TaskId(task_id))
        attempts = await local.runs.attempts(TaskId(task_id))
    order = ["plan", "lane_0", "lane_1", "lane_2", "lane_3", "report"]
    rows = [["   NODE", "STATE", "ATTEMPTS", "HOW EACH ATTEMPT ENDED"]]
    for name in order:
        ended = [str(a.outcome or "running") for a in attempts if a.node == name]
        run = nodes.get(name)
        state = str(run.state) if run is not None else "never started"
        if run is not None and run.error is not None and run.error.error_type == "Cancelled":
            state = "stopped by the cancel"
        rows.append([f"   {name}", state, str(len(ended)), ", ".join(ended) or "-"])
    return table(rows)


def _say(*lines: str) -> None:
    for line in lines:
        print(line, flush=True)


async def audit(client: McpClient, screen: Screen) -> None:
    """Part 1: a real workflow on real files, with progress."""
    source = _source_tree()
    _say(
        "",
        f"1. Audit this project's source tree ({source}) as a background task",
        "   tools/call repo_audit with params.task: the server stores the task durably and "
        "answers its id at once;",
        "   the work goes on in the server while the client polls tasks/get for progress:",
    )
    task_id = await client.start_task("repo_audit", {"path": str(source)})
    _say(f"   task {task_id}")
    await poll(client, task_id, screen)
    summary = structured(await client.result(task_id))
    languages = ", ".join(f"{row['language']} {row['files']}" for row in summary["languages"][:5])
    markers = ", ".join(f"{name} {count}" for name, count in summary["markers"].items())
    _say(
        "   tasks/result, the audit's summary:",
        f"     files      {summary['files']} ({summary['bytes'] / 1024:.0f} KiB)",
        f"     lines      {summary['lines']:,}",
        f"     languages  {languages} (files per language)",
        f"     markers    {markers}",
        f"     report     {summary['report_markdown']}",
    )


async def cancel_mid_phase(client: McpClient, screen: Screen, db: Path, pace: Pace) -> str:
    """Part 2: cancel a run in the middle of a phase; completed nodes stay completed."""
    _say(
        "",
        "2. Cancel a slow run in the middle of a phase",
        f"   countdown from {pace.start} in 4 parallel lanes (phases: plan > count > report)",
    )
    task_id = await client.start_task("countdown", {"start": pace.start, "tick_s": pace.tick_s})
    _say(f"   task {task_id}")
    seen = await poll(client, task_id, screen, until="phase 2/3 count:")
    try:
        cancelled = await client.cancel(task_id)
    except MCPError as error:
        _say(f"   the run finished before the cancel arrived ({error.error.message})")
        return task_id
    _say(
        f'   tasks/cancel while it said "{seen}": the task is now {cancelled["status"]}',
        "   and its running nodes were stopped. The node checkpoints in the database:",
        *await node_report(db, task_id),
    )
    return task_id


async def crash_and_resume(client: McpClient, screen: Screen, pace: Pace) -> tuple[str, str]:
    """Part 3, first half: start a run and kill the server with SIGKILL mid-phase."""
    _say(
        "",
        "3. Kill the server with SIGKILL in the middle of a run, restart it, and let the run "
        "finish",
    )
    task_id = await client.start_task("countdown", {"start": pace.start, "tick_s": pace.tick_s})
    _say(f"   task {task_id}")
    seen = await poll(client, task_id, screen, until="phase 2/3 count:")
    client.kill()
    _say(f'   killed the server (pid {client.pid}) with SIGKILL while it said "{seen}"')
    return task_id, seen


async def finish_after_restart(client: McpClient, screen: Screen, db: Path, task_id: str) -> None:
    """Part 3, second half: the new server takes the run back and finishes it."""
    _say(
        f"   restarted the server (pid {client.pid}) on the same database: it takes "
        "back the dead server's runs at once",
    )
    await poll(client, task_id, screen)
    result = structured(await client.result(task_id))
    _say(
        f"   tasks/result: {result}",
        "   Attempts per node (plan completed before the kill, so it did not run again;",
        "   the lanes were interrupted by the kill and ran once more):",
        *await node_report(db, task_id),
    )


async def main(argv: Sequence[str]) -> None:
    """Run the demo in ./demo-data (recreated on every run)."""
    quick = "--quick" in argv or os.environ.get("TASKLOOM_DEMO_QUICK", "") in {"1", "true"}
    pace = Pace(start=24, tick_s=0.25) if quick else Pace(start=60, tick_s=0.15)
    shutil.rmtree(DATA, ignore_errors=True)
    await anyio.Path(DATA).mkdir(parents=True)
    data = Path(await anyio.Path(DATA).absolute())
    db = data / "taskloom.db"
    screen = Screen(sys.stdout)
    _say(
        "taskloom demo: durable MCP tasks that survive cancels and crashes",
        f"Database: {db}",
        "The demo starts `taskloom serve` as a separate process and talks to it over stdio",
        "with the MCP Python SDK's client (protocol 2025-11-25, task-augmented tool calls).",
    )
    # The server runs in ./demo-data, so by default it could audit only that; the
    # operator lets it read this project's source too.
    settings = json.dumps({"repo_audit": {"allowed_roots": [str(_source_tree())]}})
    with (data / "server.log").open("a") as errlog:
        async with serve(db, cwd=data, errlog=errlog, settings=settings) as client:
            workflows = [name for name in client.tools if not name.startswith("task_")]
            _say(
                f"Server started (pid {client.pid}); its workflows, as MCP tools: "
                f"{', '.join(workflows)}"
            )
            await audit(client, screen)
            cancelled = await cancel_mid_phase(client, screen, db, pace)
            task_id, _ = await crash_and_resume(client, screen, pace)
        async with serve(db, cwd=data, errlog=errlog, settings=settings) as client:
            await finish_after_restart(client, screen, db, task_id)
    _say(
        "",
        "Done. Everything above is still in the database; look at it with the CLI",
        "(after `make demo`, it is in the virtualenv: run `. .venv/bin/activate` first):",
        f"  taskloom tasks list --db {DATA / 'taskloom.db'}",
        f"  taskloom tasks show {task_id} --db {DATA / 'taskloom.db'}",
        f"  taskloom tasks resume {cancelled} --run --db {DATA / 'taskloom.db'}"
        "   (finishes the cancelled run; plan is not run again)",
        "  taskloom run countdown --input '{\"start\": 20}'   (Ctrl-C cancels)",
    )


if __name__ == "__main__":
    try:
        anyio.run(main, sys.argv[1:], backend="asyncio")
    except* BrokenPipeError:  # `make demo | head`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)
