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
    plain_wait_s: float | None = Field(default=45.0, gt=0)
    """How long a plain ``tools/call`` of a workflow (a host without task support) waits
    for the task before answering that the work goes on, with the task's id and how to
    follow it through the fallback tools (ADR 0018). Hosts on the TypeScript SDK give up
    after 60 s; ``None``: wait until the task ends (for hosts that wait without limit)."""
    linger: bool = True
    """When the host of a stdio server goes away (its stdin closes, or SIGINT or SIGTERM)
    while tasks the server created or ran are unfinished, hand them to a background
    worker on the same SQLite database, which exits when no work is left (one per
    database: ``<db>.linger.lock``; its log: ``<db>.linger.log``; ADR 0040). ``False``:
    they wait for the next process on the database. Not used over HTTP or PostgreSQL."""
    progress_keepalive_s: float | None = Field(default=10.0, gt=0)
    """While a plain call waits, the longest silence between two ``notifications/progress``
    on its progress token, so that hosts which reset their timeout on progress keep
    waiting; ``None``: notify only when the task's progress advances."""
    max_result_bytes: int | None = Field(default=16 * 1024 * 1024, gt=0)
    """The largest result (as JSON) a request answers with; a larger one is ``-32603``
    saying so (``None``: no limit)."""
    max_unfinished_per_principal: int | None = Field(default=1_000, gt=0)
    """The most unfinished tasks (queued, running or waiting for input) one named
    principal may have; a call that would start one more is refused (``-32031``, or a
    tool error for a plain call) and stores nothing. The local user (stdio, or HTTP
    without tokens) is never limited; ``None``: no limit."""
