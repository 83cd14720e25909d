"""Settings of a taskloom process: frozen models, no globals; the CLI fills them."""

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from taskloom.engine.manager import TaskManagerSettings
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.sqlite import SqliteSettings

DEFAULT_DATABASE = Path("taskloom.db")
BUILTIN_WORKFLOWS = ("taskloom.workflows.countdown",)


class TaskloomSettings(BaseModel):
    """Everything needed to open an engine."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database: SqliteSettings | PostgresSettings = Field(
        default_factory=lambda: SqliteSettings(path=DEFAULT_DATABASE)
    )
    """An SQLite file (the default) or a PostgreSQL database shared by many processes."""
    tasks: TaskManagerSettings = Field(default_factory=TaskManagerSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    workflow_modules: tuple[str, ...] = BUILTIN_WORKFLOWS
    """Modules whose top-level workflows this process serves and runs."""
    load_entry_points: bool = True
    """Also load the workflows that installed packages advertise (``taskloom.workflows``)."""
    run_worker: bool = True
    """Execute runs in this process (a server may leave that to separate workers)."""
    run_sweeper: bool = True
    """Purge expired tasks in the background while the engine is open."""
