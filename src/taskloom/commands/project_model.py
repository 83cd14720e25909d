"""What a project file (``taskloom.toml``, ``[tool.taskloom]``) may say, and its values
for the flags."""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServeConfig(_Section):
    """``[serve]``: the HTTP endpoint and the server's limits (the ``serve`` flags)."""

    http: str | None = Field(default=None, description="HOST:PORT to serve HTTP at")
    tokens_file: str | None = None
    max_body_bytes: int | None = None
    max_result_bytes: int | None = None
    plain_wait_s: float | None = None
    linger: bool | None = None
    rate_limit: float | None = None
    max_unfinished_per_principal: int | None = None
    max_sessions_per_principal: int | None = None
    session_idle_s: float | None = None
    header_timeout_s: float | None = None
    oauth_issuer: str | None = None
    oauth_audience: str | None = None
    oauth_jwks_url: str | None = None
    oauth_algorithms: str | None = None
    oauth_leeway_s: float | None = None
    oauth_scopes: str | None = None


class WorkerConfig(_Section):
    """``[worker]``: the ``worker`` flags."""

    max_runs: int | None = None
    metrics: str | None = Field(default=None, description="HOST:PORT to serve /metrics at")


class UiConfig(_Section):
    """``[ui]``: the ``ui`` flags."""

    host: str | None = None
    port: int | None = None


class ProjectConfig(_Section):
    """What a project file may say; every key is optional."""

    db: str | None = None
    store_wait_s: float | None = Field(default=None, gt=0)
    """The store's wait (``serve`` and ``worker``: ``--store-wait-s``)."""
    workflows: list[str] = Field(default_factory=list)
    """Modules (``mypkg.flows``) or ``.py`` files whose workflows to load."""
    ttl: str | None = None
    log_format: str | None = None
    log_level: str | None = None
    settings: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    """Operator settings by workflow: ``[settings.repo_audit]``."""
    serve: ServeConfig = ServeConfig()
    worker: WorkerConfig = WorkerConfig()
    ui: UiConfig = UiConfig()


class Project(BaseModel):
    """A configuration and the file it came from."""

    model_config = ConfigDict(frozen=True)

    path: Path
    config: ProjectConfig

    def value(self, name: str) -> Any:
        """The value for the flag *name* (``db``, ``http``, ``max_runs``...), or ``None``;
        paths are made absolute against the file's folder. ``ui.host`` names a key of
        the ``[ui]`` section."""
        if name.startswith("ui."):
            return getattr(self.config.ui, name.removeprefix("ui."), None)
        for section in (self.config, self.config.serve, self.config.worker):
            if name in type(section).model_fields:
                value = getattr(section, name)
                if name in ("db", "tokens_file") and value is not None:
                    return _beside(self.path, value)
                if name == "workflows":
                    return [_workflow_beside(self.path, entry) for entry in value] or None
                return value
        return None


def _beside(config: Path, value: str) -> str:
    if "://" in value:
        return value
    return str((config.parent / Path(value).expanduser()).resolve())


def _workflow_beside(config: Path, entry: str) -> str:
    return _beside(config, entry) if entry.endswith(".py") else entry
