"""Wire constants of the MCP Tasks protocol generations taskloom serves."""

from typing import Final

LEGACY_VERSION: Final = "2025-11-25"
"""The protocol revision whose core has Tasks (``params.task``, ``tasks/*``)."""
RELATED_TASK_META_KEY: Final = "io.modelcontextprotocol/related-task"
"""``_meta`` key tying a message to a task: ``{"taskId": ...}``."""


def related_task_meta(task_id: str) -> dict[str, dict[str, str]]:
    """The related-task ``_meta`` entry for *task_id*."""
    return {RELATED_TASK_META_KEY: {"taskId": task_id}}


def tasks_capability() -> dict[str, dict[str, object]]:
    """``capabilities.tasks`` announced on a 2025-11-25 connection (a fresh dict)."""
    return {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
