"""The peer: FastMCP 4.1.2 with fastmcp-tasks 4.1.2, serving the bench's two tools as tasks.

Runs only inside the peer venv the bench creates (``bench/.peers/venv``); the backend is
``memory://`` (the default) unless ``FASTMCP_DOCKET_URL`` names Redis.
Run: ``bench/.peers/venv/bin/python bench/peer_server.py``.
"""

import os

import anyio
from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension

mcp = FastMCP("peer")
mcp.add_extension(TasksExtension(url=os.environ.get("FASTMCP_DOCKET_URL", "memory://")))


@mcp.tool(task=True)
async def noop() -> str:
    """Answer at once."""
    return "ok"


@mcp.tool(task=True)
async def hold(seconds: float = 60.0) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "ok"


if __name__ == "__main__":
    mcp.run(transport="stdio", show_banner=False)
