"""Settings of the SQLite store."""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SqliteSettings(BaseModel):
    """Where the database lives and how hard it works to keep every commit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path
    """The database file (created with its folders if missing, unless ``read_only``)."""
    read_only: bool = False
    """Open the file read-only (SQLite's ``mode=ro``): never create, migrate or write it;
    a missing file, or one whose schema is behind, is refused. Writes fail."""
    synchronous: Literal["FULL", "NORMAL", "EXTRA"] = "FULL"
    """``FULL`` (the default) survives power loss; ``NORMAL`` may lose the last commits then."""
    store_wait_s: float = Field(default=5.0, gt=0)
    """The longest one operation waits for a lock held by another process before it
    fails with "store unavailable, retry later" (ADR 0038)."""
    busy_timeout_ms: int = Field(default=1_000, ge=0)
    """How long SQLite itself waits for another process's write lock, each try."""
    lock_retry_s: float | None = Field(default=None, ge=0)
    """How long taskloom keeps retrying a write that found the database locked; default:
    what ``store_wait_s`` leaves after SQLite's own wait."""

    @property
    def lock_retry_window_s(self) -> float:
        """How long a locked operation is retried (see ``lock_retry_s``)."""
        if self.lock_retry_s is not None:
            return self.lock_retry_s
        return max(0.0, self.store_wait_s - self.busy_timeout_ms / 1000)

    max_batch: int = Field(default=256, ge=1)
    """Most writes committed together in one transaction (group commit)."""
    verify_on_open: bool = True
    """Check the file with SQLite's ``quick_check`` when opening it, so that a damaged
    database is refused before anything is written to it. The check reads the whole file
    once; turn it off only for a very large database that must open fast."""
