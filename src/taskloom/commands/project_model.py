"""What a project file (``taskloom.toml``, ``[tool.taskloom]``) may say, and its values
for the flags. Its ``[serve]`` and ``[worker]`` tables are made from the setting table
(:mod:`taskloom.commands.setting_table`): every such flag is a key, without its dashes."""

from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model

from taskloom.commands.setting import Section
from taskloom.commands.setting_table import in_section

PATHS: Final = frozenset({"db", "tokens_file"})
"""Keys whose value is a path, relative to the file's folder."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _section(name: str, section: Section, doc: str) -> type[_Section]:
    """The table of the project file whose keys the setting table puts in *section*."""
    fields: dict[str, Any] = {
        setting.name: (setting.kind | None, Field(default=None, description=setting.help))
        for setting in in_section(section)
    }
    model: type[_Section] = create_model(name, __base__=_Section, __doc__=doc, **fields)
    return model


ServeConfig = _section("ServeConfig", "serve", "``[serve]``: the ``serve`` flags.")
WorkerConfig = _section("WorkerConfig", "worker", "``[worker]``: the ``worker`` flags.")


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
    serve: ServeConfig = Field(default_factory=ServeConfig)  # type: ignore[valid-type]
    worker: WorkerConfig = Field(default_factory=WorkerConfig)  # type: ignore[valid-type]
    ui: UiConfig = UiConfig()


class Project(BaseModel):
    """A configuration and the file it came from."""

    model_config = ConfigDict(frozen=True)

    path: Path
    config: ProjectConfig

    def value(self, key: str) -> Any:
        """The value of *key* (``db``, ``serve.http``, ``worker.max_runs``, ``ui.host``;
        ``http`` alone is looked for at the top, then in ``[serve]`` and ``[worker]``), or
        ``None``; paths are made absolute against the file's folder."""
        section, _, name = key.rpartition(".")
        tables: tuple[BaseModel, ...] = (self.config, self.config.serve, self.config.worker)
        if section:
            tables = (getattr(self.config, section),)
        table = next((t for t in tables if name in type(t).model_fields), self.config)
        value = getattr(table, name, None)
        if value is None:
            return None
        if name in PATHS:
            return _beside(self.path, value)
        if name == "workflows":
            return [_workflow_beside(self.path, entry) for entry in value] or None
        return value


def _beside(config: Path, value: str) -> str:
    if "://" in value:
        return value
    return str((config.parent / Path(value).expanduser()).resolve())


def _workflow_beside(config: Path, entry: str) -> str:
    return _beside(config, entry) if entry.endswith(".py") else entry
