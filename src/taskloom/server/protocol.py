"""Wire constants of the MCP Tasks protocol generations taskloom serves."""

from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

LEGACY_VERSION: Final = "2025-11-25"
"""The protocol revision whose core has Tasks (``params.task``, ``tasks/*``)."""
RELATED_TASK_META_KEY: Final = "io.modelcontextprotocol/related-task"
"""``_meta`` key tying a message to a task: ``{"taskId": ...}``."""
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension (SEP-2663): advertised in ``server/discover`` and
declared by the client in each request's ``_meta`` client capabilities."""


def related_task_meta(task_id: str) -> dict[str, dict[str, str]]:
    """The related-task ``_meta`` entry for *task_id*."""
    return {RELATED_TASK_META_KEY: {"taskId": task_id}}


def tasks_capability() -> dict[str, dict[str, object]]:
    """``capabilities.tasks`` announced on a 2025-11-25 connection (a fresh dict)."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def is_modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when the request speaks a protocol generation with per-request envelopes
    (2026-07-28), where tasks are the extension."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def declares_tasks_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when *this request* declared the tasks extension (2026-07-28 only: on older
    versions the extension does not exist, whatever the client sends)."""
    if not is_modern(ctx):
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return extensions is not None and TASKS_EXTENSION in extensions
