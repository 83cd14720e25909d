"""The MCP adapter: workflows as tools, their runs as durable MCP tasks (2025-11-25 core
Tasks and the 2026-07-28 tasks extension)."""

from taskloom.server.app import TaskServer
from taskloom.server.settings import ServerSettings

__all__ = ("ServerSettings", "TaskServer")
