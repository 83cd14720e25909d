"""Writes docs/configuration.md from the settings models and the setting table, so the
reference cannot drift.

``python -m scripts.docs_config > docs/configuration.md`` (from the checkout's root)
regenerates it; a test fails when the committed page differs. Each field's text is its
attribute docstring (or its ``Field(description=...)``). The flag, variable and
project-file key of each ``serve`` and ``worker`` setting come from
:mod:`taskloom.commands.setting_table`; the few other ways in are in :data:`FLAGS`.
"""

import ast
import inspect
import itertools
import json
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, Union, get_args, get_origin

import annotated_types
import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from taskloom.cli import app
from taskloom.commands.setting import Setting
from taskloom.commands.setting_table import SETTINGS, filling
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import TaskManagerSettings
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings
from taskloom.server.http import HttpSettings, OAuthSettings
from taskloom.workflows.command_matrix import CommandMatrixSettings
from taskloom.workflows.repo_audit import RepoAuditSettings

REGENERATE: Final = ".venv/bin/python -m scripts.docs_config > docs/configuration.md"

SECTIONS: Final[tuple[tuple[type[BaseModel], str, str], ...]] = (
    (TaskloomSettings, "TaskloomSettings", "`taskloom.config`: everything a process needs."),
    (SqliteSettings, "database: SqliteSettings", "The default store: one SQLite file."),
    (
        PostgresSettings,
        "database: PostgresSettings",
        "Chosen by a `postgresql://` URL as the database ([postgresql.md](postgresql.md)).",
    ),
    (TaskManagerSettings, "tasks: TaskManagerSettings", "Retention, polling and paging."),
    (WorkerSettings, "worker: WorkerSettings", "How a worker takes on and keeps runs."),
    (ServerSettings, "server: ServerSettings", "The MCP server ([server.md](server.md))."),
    (
        HttpSettings,
        "HttpSettings (taskloom serve --http)",
        "Streamable HTTP, outside `TaskloomSettings` (`taskloom.server.http`).",
    ),
    (
        OAuthSettings,
        "HttpSettings.oauth: OAuthSettings",
        "JWT access tokens of an OAuth authorization server ([server.md](server.md#oauth)).",
    ),
    (
        CommandMatrixSettings,
        "workflow_settings.command_matrix",
        "Operator settings of the built-in `command_matrix` workflow.",
    ),
    (
        RepoAuditSettings,
        "workflow_settings.repo_audit",
        "Operator settings of the built-in `repo_audit` workflow.",
    ),
)

FLAGS: Final[dict[tuple[type[BaseModel], str], str]] = {
    (TaskloomSettings, "exposure"): "`network` under `serve --http`, else `local`",
    (HttpSettings, "tokens"): "`TASKLOOM_TOKENS` (`principal:token` entries, comma-separated)",
}
"""The ways in that are not a setting of the table (a test checks them against the help)."""


def command_paths(command: click.Command, path: str = "") -> Iterator[tuple[str, click.Command]]:
    """Each command of the tree under *command* that runs (``tasks list``), by its path."""
    if isinstance(command, click.Group):
        for name, child in command.commands.items():
            yield from command_paths(child, f"{path} {name}".strip())
    else:
        yield path, command


def commands_of(setting: Setting[Any]) -> list[str]:
    """The commands that take *setting*'s flag, as the command tree declares them."""
    return [
        path
        for path, command in command_paths(app)
        if any(setting.flag in getattr(param, "opts", ()) for param in command.params)
    ]


def commands_text(setting: Setting[Any]) -> str:
    """The commands that take *setting*'s flag: listed, or every command but a few (a
    whole group as ``db ...``)."""
    every = [path for path, _ in command_paths(app)]
    taking = commands_of(setting)
    listed, prefix = taking, ""
    if len(taking) > len(every) / 2:
        listed, prefix = [path for path in every if path not in taking], "every command except "
    groups = {path.split()[0] for path in listed if " " in path}
    whole = {
        group for group in groups if all(p in listed for p in every if p.startswith(group + " "))
    }
    names = [f"{group} ..." for group in sorted(whole)]
    names += [path for path in listed if path.split()[0] not in whole]
    if not names:
        return "every command"
    return prefix + ", ".join(f"`{name}`" for name in names)


def flag_text(setting: Setting[Any]) -> str:
    """How *setting* is given: flag, variable, project-file key, what 0 means; where its
    key is at the top level, the commands that take it."""
    flag = setting.flags + (f" {setting.metavar}" if setting.metavar else "")
    key = setting.project_key
    text = f"`{flag}`{' (repeatable)' if setting.repeatable else ''}, `{setting.variable}`, "
    text += f"the project file's `{key}`"
    notes = [f"0: {setting.zero}"] if setting.zero else []
    notes += [setting.note] if setting.note else []
    notes += [commands_text(setting)] if not setting.section else []
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _flag_cell(model: type[BaseModel], name: str) -> str:
    ways = [flag_text(setting) for setting, field in filling(model.__name__) if field == name]
    if (model, name) in FLAGS:
        ways.append(FLAGS[(model, name)])
    return "; ".join(ways)


_BOUNDS: Final = (
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Ge, "ge", "≥ {}"),
    (annotated_types.Lt, "lt", "< {}"),
    (annotated_types.Le, "le", "≤ {}"),
)


def attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """The string literal after each annotated attribute of *model*'s class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    found: dict[str, str] = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def type_name(annotation: Any) -> str:
    """*annotation* as a reader writes it: ``int | None``, ``"FULL" | "NORMAL"``."""
    origin = get_origin(annotation)
    if origin is Literal:
        return " | ".join(json.dumps(value) for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in get_args(annotation))
    if origin is not None:
        args = ", ".join(
            "..." if arg is Ellipsis else type_name(arg) for arg in get_args(annotation)
        )
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _bounds(field: FieldInfo) -> str:
    parts = [
        template.format(getattr(item, attribute))
        for item in field.metadata
        for kind, attribute, template in _BOUNDS
        if isinstance(item, kind)
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return f"`{type(value).__name__}(...)`" + (
            f" (`{value.path}`)" if isinstance(value, SqliteSettings) else ""
        )
    if value is None or isinstance(value, bool):
        return f"`{value!r}`"
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def rows(model: type[BaseModel]) -> Iterator[str]:
    """The table rows of *model*'s fields."""
    docs = attribute_docstrings(model)
    for name, field in model.model_fields.items():
        meaning = docs.get(name) or field.description or ""
        if not meaning:
            raise ValueError(f"{model.__name__}.{name} has no docstring or description")
        flag = _flag_cell(model, name)
        yield (
            f"| `{name}` | {_cell(type_name(field.annotation))}{_bounds(field)} "
            f"| {_cell(_default(field))} | {_cell(meaning)} | {_cell(flag)} |"
        )


def setting_rows() -> Iterator[str]:
    """The table of every ``serve`` and ``worker`` setting: one row each."""
    for setting in SETTINGS:
        key = setting.project_key
        fills = ", ".join(f"`{fill}`" for fill in setting.fills) or "(the process itself)"
        yield (
            f"| `{setting.flags}` | `{setting.variable}` | `{key}` "
            f"| {commands_text(setting)} | {fills} | {_cell(setting.help)} |"
        )


def _check() -> None:
    models = {model.__name__: model for model, _, _ in SECTIONS}
    for setting in SETTINGS:
        for fill in setting.fills:
            owner, _, name = fill.partition(".")
            if owner not in models or name not in models[owner].model_fields:
                raise ValueError(f"the setting {setting.name} fills {fill}, which does not exist")
    for model, name in FLAGS:
        if name not in model.model_fields:
            raise ValueError(f"FLAGS names {model.__name__}.{name}, which does not exist")


def render() -> str:
    """The whole configuration reference page."""
    _check()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the settings models; do not edit. Regenerate with:",
        f"     {REGENERATE} -->",
        "",
        "Every setting of a taskloom process, from the pydantic models that hold it. The",
        "models are frozen and refuse unknown keys. The `taskloom` command fills them from",
        "its flags, each of which can also be set by a `TASKLOOM_*` variable and by a key",
        "of the project file (last column; every flag of `serve` and `worker` is in the",
        "table at the end); a setting with no flag takes its default there. A program that",
        "embeds taskloom builds `TaskloomSettings(...)` itself and may set any field",
        "([operations.md](operations.md) has the process-level picture).",
    ]
    for model, title, intro in SECTIONS:
        lines += [
            "",
            f"## {title}",
            "",
            intro,
            "",
            "| field | type | default | meaning | flag, variable |",
            "|---|---|---|---|---|",
            *rows(model),
        ]
    lines += [
        "",
        "## The flags of serve and worker",
        "",
        "Each is declared once (`taskloom.commands.setting_table`, ADR 0044): its flag, its",
        "variable, its key in the project file (the flag without its dashes, in `[serve]`,",
        "`[worker]` or at the top level), the commands that take it (`db`, `workflows` and",
        "`settings` are flags of other commands too) and the fields it fills. A flag wins",
        "over its variable, and both over the project file; what none of them gives is the",
        "field's default.",
        "",
        "| flag | variable | project file | commands | fills | meaning |",
        "|---|---|---|---|---|---|",
        *setting_rows(),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
