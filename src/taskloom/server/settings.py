"""Settings of the MCP server (the CLI and the composition root fill them)."""

from pydantic import BaseModel, ConfigDict, Field


class ServerSettings(BaseModel):
    """How the server names itself and how it waits on tasks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "taskloom"
    """The ``serverInfo.name`` announced to clients."""
    fallback_tools: bool = True
    """Also serve ``task_list``, ``task_status``, ``task_result``, ``task_cancel`` and
    ``task_answer``, for hosts that cannot use MCP Tasks."""
    recheck_s: float | None = Field(default=1.0, gt=0)
    """How often a waiting request (``tasks/result``, a plain call) re-reads its task for
    changes made by other processes; ``None`` relies on this process's change feed alone
    (enough when the worker runs in the server process). Status followers always rely
    on the feed alone."""
    max_result_bytes: int | None = Field(default=16 * 1024 * 1024, gt=0)
    """The largest result (as JSON) a request answers with; a larger one is ``-32603``
    saying so (``None``: no limit)."""
