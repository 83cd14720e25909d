"""The existing server's MCP endpoint mounted in a FastAPI app, next to its own routes.

Run: ``uvicorn app:app`` (with ``../existing_server`` importable, as below).
"""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "existing_server"))
from server import mcp  # the MCPServer with its durable tools

mcp_app = mcp.streamable_http_app()  # before the session manager is used


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with mcp.session_manager.run():  # the MCP server's lifespan: taskloom's engine
        yield


app = FastAPI(lifespan=lifespan)
app.mount("/tools", mcp_app)


@app.get("/health")
def health() -> dict[str, str]:
    """An ordinary route of the app."""
    return {"status": "ok"}
