"""An existing ``MCPServer`` with plain tools, a resource and a prompt, plus DurableTasks."""

from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

from taskloom.bootstrap import durable_tasks
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import NodeContext
from taskloom.engine.durable import durable
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from tests.server.flows import gate


@durable
async def slow_sum(a: int, b: int = 1, ctx: NodeContext | None = None) -> int:  # type: ignore[type-arg]
    """Add two numbers, durably."""
    if ctx is not None:
        await ctx.report(1, 1, "added")
    return a + b


@durable(timeout=30)
async def wait_gate(name: str) -> str:
    """Wait until the test opens the gate *name*."""
    await gate(name).wait()
    return f"opened {name}"


def settings(database: Path) -> TaskloomSettings:
    return TaskloomSettings(
        database=SqliteSettings(path=database, synchronous="NORMAL"),
        worker=WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
    )


def existing_server(database: Path) -> MCPServer[None]:
    """The developer's server: three plain things, and two durable tools added."""
    tasks = durable_tasks([slow_sum, wait_gate], settings(database))
    mcp: MCPServer[None] = MCPServer("mine", extensions=[tasks], lifespan=tasks.lifespan)

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers at once."""
        return a + b

    @mcp.tool()
    async def announce(ctx: Context) -> str:
        """Tell listeners the tool list changed."""
        await ctx.notify_tools_changed()
        return "announced"

    @mcp.resource("note://readme")
    def readme() -> str:
        """A note."""
        return "read me"

    @mcp.prompt()
    def greet(name: str) -> str:
        """Greet someone."""
        return f"Hello, {name}!"

    return mcp
