"""What a project file (``taskloom.toml``, ``[tool.taskloom]``) may say, and its values
for the flags. Its top level and its ``[serve]`` and ``[worker]`` tables are made from
the setting table (:mod:`taskloom.commands.setting_table`): every flag of ``serve`` and
``worker`` is a key, without its dashes, of the type, choices and bounds the flag takes."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, create_model

from taskloom.commands.setting import Section, Setting
from taskloom.commands.setting_table import in_section

PATHS: Final = frozenset({"db", "tokens_file"})
"""Keys whose value is a path, relative to the file's folder."""


class Table(BaseModel):
    """A table of the project file: frozen, and an unknown key is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=Table)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _annotation(setting: Setting[Any]) -> Any:
    """The type of *setting*'s key: its choices (any case, as the flag takes them), a
    positive number, a list of strings, or its kind."""
    if setting.choices:
        return Annotated[Literal[setting.choices], BeforeValidator(_lower)]
    if setting.positive:
        return Annotated[setting.kind, Field(gt=0)]
    return list[str] if setting.repeatable else setting.kind


def section_model(name: str, section: Section, doc: str, base: type[M]) -> type[M]:
    """The table of the project file whose keys the setting table puts in *section* (a
    setting whose key has another shape, ``[settings.NAME]``, is *base*'s)."""
    fields: dict[str, Any] = {
        setting.name: (_annotation(setting) | None, Field(default=None, description=setting.help))
        for setting in in_section(section)
        if setting.project_default
    }
    model: type[M] = create_model(name, __base__=base, __doc__=doc, **fields)
    return model


if TYPE_CHECKING:  # made at run time: mypy knows the models they are made on
    ServeConfig = Table
    WorkerConfig = Table
else:
    ServeConfig = section_model("ServeConfig", "serve", "``[serve]``: the serve flags.", Table)
    WorkerConfig = section_model("WorkerConfig", "worker", "``[worker]``: the worker flags.", Table)


class UiConfig(Table):
    """``[ui]``: the ``ui`` flags."""

    host: str | None = None
    port: int | None = None


class _Tables(Table):
    """The keys of the project file that are not a flag of ``serve`` or ``worker``, and
    its tables."""

    ttl: str | None = None
    """``run --ttl``."""
    settings: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    """Operator settings by workflow: ``[settings.repo_audit]`` (``--settings``)."""
    serve: ServeConfig = Field(default_factory=ServeConfig)
    worker: WorkerConfig = Field(default_factory=WorkerConfig)
    ui: UiConfig = UiConfig()


if TYPE_CHECKING:
    ProjectConfig = _Tables
else:
    ProjectConfig = section_model(
        "ProjectConfig",
        "",
        "What a project file may say; every key is optional. Its top-level keys (``db``, "
        "``workflows``, ``store_wait_s``, ``log_format``, ``log_level``) are the setting "
        "table's.",
        _Tables,
    )


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
