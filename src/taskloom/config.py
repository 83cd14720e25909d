"""Settings of a taskloom process: frozen models, no globals; the CLI fills them."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from taskloom.engine.dag import Exposure
from taskloom.engine.manager import TaskManagerSettings
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings

DEFAULT_DATABASE = Path("taskloom.db")
BUILTIN_WORKFLOWS = (
    "taskloom.workflows.countdown",
    "taskloom.workflows.repo_audit",
    "taskloom.workflows.command_matrix",  # refuses every call until programs are allowed
)


class TaskloomSettings(BaseModel):
    """Everything needed to open an engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database: SqliteSettings | PostgresSettings = Field(
        default_factory=lambda: SqliteSettings(path=DEFAULT_DATABASE)
    )
    """An SQLite file (the default) or a PostgreSQL database shared by many processes."""
    tasks: TaskManagerSettings = Field(default_factory=TaskManagerSettings)
    """Retention, polling and paging of tasks."""
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    """How this process's worker executes runs (when ``run_worker``)."""
    server: ServerSettings = Field(default_factory=ServerSettings)
    """How the MCP server names itself, waits on tasks and limits results."""
    workflow_modules: tuple[str, ...] = BUILTIN_WORKFLOWS
    """Modules whose top-level workflows this process serves and runs."""
    workflow_settings: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    """Operator settings by workflow name, e.g. ``{"command_matrix": {"allowed_programs":
    ["make", "pytest"]}}``; each is validated by that workflow's settings model at start."""
    exposure: Exposure = "local"
    """Who can call the workflows: ``local`` (stdio, the CLI, a worker) or ``network`` (an
    HTTP server sets it). Workflows' settings defaults depend on it: unconfigured,
    ``repo_audit`` reads the working directory of a local process and nothing on a network
    server."""
    load_entry_points: bool = True
    """Also load the workflows that installed packages advertise (``taskloom.workflows``)."""
    run_worker: bool = True
    """Execute runs in this process (a server may leave that to separate workers)."""
    worker_only: bool = False
    """The process only runs workflows (``taskloom worker``): on PostgreSQL it hears, of
    what other processes change, only what its worker acts on (new work, a parked run made
    claimable, a cancel or a failure; ADR 0062), not every claim, progress write and end of
    every other worker. Nothing in it may follow other processes' tasks (a result, a
    dashboard, a reader): a wait for another process's change without a re-check period
    (``wait_until_terminal`` without ``recheck_every``) would wait forever. Off: it hears
    every change."""
    run_sweeper: bool = True
    """Purge expired tasks in the background while the engine is open."""
    freeze_start_up: bool = False
    """Once the first engine of the process has started, keep what the process holds then
    out of the garbage collector's later walks (``gc.freeze``): walking it took some 20%
    of a busy worker's CPU (ADR 0061); and collect the young generation every 10,000
    allocations instead of 700 (ADR 0070). Frozen garbage is never collected, nor what it
    references: on in the processes taskloom owns (``taskloom serve``, ``worker``, ``run``,
    the lingering worker), off by default in a host that embeds the engine."""
