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
    acquire_timeout_s: float = Field(default=30.0, gt=0)
    """How long one operation waits for a free pooled connection."""
    retry_s: float = Field(default=30.0, ge=0)
    """How long an operation keeps retrying transient failures (a lost connection, a
    serialization failure, a deadlock, a restarting server)."""

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

    @model_validator(mode="after")
    def _pool_bounds(self) -> "PostgresSettings":
        if self.min_connections > self.max_connections:
            raise ValueError("min_connections cannot exceed max_connections")
        return self


def is_postgres_url(value: str) -> bool:
    """True when *value* names a PostgreSQL database rather than a file."""
    return value.startswith(URL_SCHEMES)
