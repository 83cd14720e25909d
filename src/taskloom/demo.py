"""`make demo`: the durable task core end to end, in a real SQLite file.

Until the workflow runner and the MCP server exist, the demo drives the TaskManager
directly: it creates tasks, moves them through their states, asks for and receives input,
cancels one mid-run, lists them page by page, and reopens the database to show that
everything committed survived.
"""

import shutil
import sys
from pathlib import Path

import anyio

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.errors import IllegalTransitionError, TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Task
from taskloom.persistence.sqlite import SqliteSettings

DATA = Path("demo-data")


def show(label: str, task: Task) -> None:
    """One line per task: id, state, version and what it says."""
    progress = ""
    if task.progress is not None and task.progress.total:
        progress = f" {task.progress.completed:g}/{task.progress.total:g}"
    message = f"  {task.status_message}" if task.status_message else ""
    print(f"  {label:<22} {task.id[:10]}…  {task.state:<15} v{task.version}{progress}{message}")


async def phase_one(manager: TaskManager) -> dict[str, str]:
    """Create, run, ask, answer, cancel: every state a task can be in."""
    print("1. Creating tasks (each is committed with synchronous=FULL before create returns)")
    audit = await manager.create("repo_audit", {"path": "src"}, idempotency_key="audit-src")
    again = await manager.create("repo_audit", {"path": "src"}, idempotency_key="audit-src")
    show("audit", audit)
    print(f"  same idempotency key, same arguments -> same task: {again.id == audit.id}")
    deploy = await manager.create("command_matrix", {"commands": ["make test"]})
    long_job = await manager.create("countdown", {"seconds": 600})
    show("deploy", deploy)
    show("long job", long_job)

    print("\n2. Running the audit through its phases")
    await manager.start(audit.id)
    phases = ["list files", "analyse", "report"]
    for number, phase in enumerate(phases, start=1):
        show(
            "audit",
            await manager.report_progress(
                audit.id,
                completed=number,
                total=len(phases),
                message=f"phase {number}/{len(phases)} {phase}",
            ),
        )
    show(
        "audit",
        await manager.complete(audit.id, {"files": 42, "todo": 3}, status_message="audit done"),
    )

    print("\n3. A task that asks the human before its last step")
    await manager.start(deploy.id)
    question = InputRequest(
        message="All checks passed. Run the final deploy command?",
        requested_schema={"type": "object", "properties": {"confirm": {"type": "boolean"}}},
    )
    show("deploy", await manager.require_input(deploy.id, "final-step", question))
    show("deploy", await manager.provide_input(deploy.id, "final-step", {"confirm": True}))
    show("deploy", await manager.complete(deploy.id, {"deployed": True}, status_message="deployed"))

    print("\n4. Cancelling a long task half-way")
    await manager.start(long_job.id)
    await manager.report_progress(long_job.id, completed=300, total=600, message="halfway")
    show("long job", await manager.cancel(long_job.id, reason="cancelled by the operator"))
    try:
        await manager.complete(long_job.id, "too late")
    except IllegalTransitionError as error:
        print(f"  its late completion is refused: {error}")
    return {"audit": audit.id, "deploy": deploy.id, "long job": long_job.id}


async def phase_two(manager: TaskManager, ids: dict[str, str]) -> None:
    """Read everything back after reopening the database."""
    print("\n5. After closing and reopening the database, everything committed is still there")
    for label, task_id in ids.items():
        show(label, await manager.get(task_id))
    audit = await manager.get(ids["audit"])
    print(f"  audit result: {audit.result}")

    print("\n6. Listing, newest first, two per page (cursors are opaque)")
    cursor: str | None = None
    page_number = 0
    while True:
        page = await manager.list(limit=2, cursor=cursor)
        page_number += 1
        print(f"  page {page_number}: " + ", ".join(f"{t.name} ({t.state})" for t in page.tasks))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor

    print("\n7. Retention: a task whose TTL ran out disappears and is purged")
    brief = await manager.create("countdown", {"seconds": 1}, ttl_ms=100)
    await anyio.sleep(0.15)
    try:
        await manager.get(brief.id)
    except TaskNotFoundError as error:
        print(f"  {error}")
    print(f"  purged {await manager.purge_expired()} expired task(s)")


async def main() -> None:
    """Run the demo in ./demo-data/taskloom.db (recreated on every run)."""
    shutil.rmtree(DATA, ignore_errors=True)
    database = SqliteSettings(path=DATA / "taskloom.db")
    settings = TaskloomSettings(database=database, run_worker=False)
    print(f"taskloom durable task core demo, database {database.path}\n")
    async with open_engine(settings) as engine:
        ids = await phase_one(engine.manager)
    async with open_engine(settings) as engine:
        await phase_two(engine.manager, ids)
    print("\nDone. The workflow runner and the MCP server build on this core.")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
    sys.exit(0)
