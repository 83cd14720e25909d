"""The MCP adapter: workflows as tools, their runs as durable MCP tasks (2025-11-25 core
Tasks and the 2026-07-28 tasks extension).

``TaskServer`` is imported on first use, so that reading ``ServerSettings`` (every
command does, through the configuration) does not load the MCP SDK.
"""

from typing import TYPE_CHECKING, Any

from taskloom.server.settings import ServerSettings

if TYPE_CHECKING:
    from taskloom.server.app import TaskServer

__all__ = ("ServerSettings", "TaskServer")


def __getattr__(name: str) -> Any:
    if name == "TaskServer":
        from taskloom.server.app import TaskServer  # lazy: see above

        return TaskServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
