"""Settings of the PostgreSQL store."""

import re
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

URL_SCHEMES: Final = ("postgresql://", "postgres://")
_SCHEMA_NAME: Final = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresSettings(BaseModel):
    """Which database and schema hold taskloom's tables, and how the pool behaves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(repr=False)
    """A libpq URL, e.g. ``postgresql://user:password@host:5432/dbname`` (left out of
    ``repr``, which would show its password)."""
    schema_name: str = "taskloom"
    """The schema that holds taskloom's tables (created if missing); other applications
    may share the database, never the schema."""
    min_connections: int = Field(default=1, ge=0)
    """Connections the pool keeps open while idle."""
    max_connections: int = Field(default=10, ge=1)
    """Most connections one process opens (a server and its worker share them)."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    """How long opening the store waits for the server before giving up."""
    store_wait_s: float = Field(default=5.0, gt=0)
    """The longest one operation waits for the database (a free connection, a server
    coming back, retries of transient failures) before it fails with "store unavailable,
    retry later" (ADR 0038): a request hangs no longer than hosts wait for an answer."""
    acquire_timeout_s: float | None = Field(default=None, gt=0)
    """How long one operation waits for a free pooled connection (default:
    ``store_wait_s``)."""
    retry_s: float | None = Field(default=None, ge=0)
    """How long an operation keeps retrying transient failures (a lost connection, a
    serialization failure, a deadlock, a restarting server); default: ``store_wait_s``."""
    reconnect_max_s: float = Field(default=0.5, gt=0)
    """Longest pause between two attempts to reconnect to a server that went away, so
    that work goes on within about this long once it is back, whatever the outage's
    length (psycopg_pool doubles its pause without a cap)."""

    @field_validator("url")
    @classmethod
    def _is_postgres_url(cls, url: str) -> str:
        if not url.startswith(URL_SCHEMES):
            raise ValueError("a PostgreSQL URL starts with postgresql:// or postgres://")
        return url

    @field_validator("schema_name")
    @classmethod
    def _is_plain_name(cls, name: str) -> str:
        if not _SCHEMA_NAME.match(name):
            raise ValueError(
                "a schema name is 1 to 63 lower-case letters, digits or underscores, "
                "not starting with a digit"
            )
        return name

    @property
    def acquire_wait_s(self) -> float:
        """How long one operation waits for a free connection."""
        return self.acquire_timeout_s if self.acquire_timeout_s is not None else self.store_wait_s

    @property
    def retry_window_s(self) -> float:
        """How long one operation retries transient failures."""
        return self.retry_s if self.retry_s is not None else self.store_wait_s

    @model_validator(mode="after")
    def _pool_bounds(self) -> "PostgresSettings":
        if self.min_connections > self.max_connections:
            raise ValueError("min_connections cannot exceed max_connections")
        return self


def is_postgres_url(value: str) -> bool:
    """True when *value* names a PostgreSQL database rather than a file."""
    return value.startswith(URL_SCHEMES)
