"""An existing MCP server, with its own tools, resource and prompt, that gains two durable
tools: a durable plain function and a small DAG workflow. Run: ``python server.py``."""

import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from taskloom import NodeContext, RetryPolicy, TaskloomSettings, Workflow, durable, durable_tasks
from taskloom.persistence.sqlite import SqliteSettings

DATABASE = Path(
    os.environ.get("NOTES_TASKS_DB") or Path(__file__).resolve().parent / "notes-tasks.db"
).resolve()
"""The tasks' SQLite file: ``NOTES_TASKS_DB``, or ``notes-tasks.db`` next to this file. An
absolute path: a host may start the server in any folder (often one it cannot write)."""


def check_database() -> None:
    """Exit with one line, not a traceback, when the database file cannot be written."""
    try:
        DATABASE.touch(exist_ok=True)  # SQLite takes an empty file as a new database
    except OSError as error:
        sys.exit(
            f"notes: cannot write the task database {DATABASE}: {error.strerror}; "
            "set NOTES_TASKS_DB to a file in a folder you can write"
        )


@durable(retry=RetryPolicy(max_attempts=3), timeout=120)
async def word_stats(text: str, ctx: NodeContext[Any] | None = None) -> dict[str, int]:
    """Count the words, lines and characters of a text (a durable job of one step)."""
    if ctx is not None:
        await ctx.report(1, 1, "counted")
    return {"words": len(text.split()), "lines": len(text.splitlines()), "chars": len(text)}


class ReleaseInput(BaseModel):
    """Check that a release is ready: its version and its changelog entry."""

    version: str
    changelog: str = ""


release_checklist = Workflow(
    "release_checklist", version="1", input=ReleaseInput, phases=["check", "report"]
)


@release_checklist.node(phase="check")
async def version_is_semver(ctx: NodeContext[ReleaseInput]) -> bool:
    parts = ctx.input.version.split(".")
    return len(parts) == 3 and all(part.isdigit() for part in parts)


@release_checklist.node(phase="check")
async def changelog_mentions_it(ctx: NodeContext[ReleaseInput]) -> bool:
    return ctx.input.version in ctx.input.changelog


@release_checklist.node(phase="report", deps=[version_is_semver, changelog_mentions_it])
async def verdict(ctx: NodeContext[ReleaseInput]) -> str:
    problems = []
    if not ctx.output(version_is_semver):
        problems.append("the version is not MAJOR.MINOR.PATCH")
    if not ctx.output(changelog_mentions_it):
        problems.append("the changelog does not mention it")
    return "ready" if not problems else "not ready: " + "; ".join(problems)


tasks = durable_tasks(
    [word_stats, release_checklist],
    TaskloomSettings(database=SqliteSettings(path=DATABASE), workflow_modules=()),
)
mcp = MCPServer("notes", extensions=[tasks], lifespan=tasks.lifespan)


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two numbers (a plain tool: answered at once, as before)."""
    return a + b


@mcp.resource("notes://readme")
def readme() -> str:
    """What this server is."""
    return "A notes server with two durable tools."


@mcp.prompt()
def review(topic: str) -> str:
    """Ask for a review of a topic."""
    return f"Please review {topic}."


if __name__ == "__main__":
    check_database()
    mcp.run()
