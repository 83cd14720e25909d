"""Issue 27, items 2 and 4: every setting of ``serve`` and ``worker`` is declared once, and
reaches its field four ways: its flag, its variable, its project-file key, and a row of
the docs table. The docs' promise that ``[serve]`` takes "the serve flags, without their
dashes" is checked against the command itself (ADR 0044)."""

import ast
import dataclasses
import inspect
import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from pydantic import BaseModel

from taskloom.commands.app import serve, worker
from taskloom.commands.project_model import ProjectConfig, ServeConfig, WorkerConfig
from taskloom.commands.serve import process_settings
from taskloom.commands.setting import Setting, Values
from taskloom.commands.setting_table import BY_NAME, SETTINGS
from taskloom.commands.worker import worker_settings
from taskloom.config import DEFAULT_DATABASE, TaskloomSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server.http import HttpSettings

ROOT = Path(__file__).resolve().parents[2]
ISSUER = "https://id.example.com/tenant"
AUDIENCE = "https://mcp.example.com/mcp"
SECRET = "s3cret-token-of-ann-1234"

Settings = tuple[TaskloomSettings, HttpSettings | None]


def _oauth(settings: Settings) -> Any:
    http = settings[1]
    assert http is not None
    assert http.oauth is not None
    return http.oauth


def _path(settings: Settings) -> Path:
    database = settings[0].database
    assert isinstance(database, SqliteSettings)
    return database.path


def _http(settings: Settings) -> HttpSettings:
    assert settings[1] is not None
    return settings[1]


EXAMPLES: dict[str, tuple[str, Any, Callable[[Settings, Values], Any], Any]] = {
    # name: (flag and variable text, project-file value, what it reached, expected)
    "db": ("{tmp}/x.db", "{tmp}/x.db", lambda s, v: _path(s), "{tmp}/x.db"),
    "store_wait_s": ("2.5", 2.5, lambda s, v: s[0].database.store_wait_s, 2.5),
    "workflows": (
        "my.flows",
        ["my.flows"],
        lambda s, v: s[0].workflow_modules[-1],
        "my.flows",
    ),
    "settings": (
        '{"repo_audit": {"reports_dir": "r"}}',
        {"repo_audit": {"reports_dir": "r"}},
        lambda s, v: s[0].workflow_settings,
        {"repo_audit": {"reports_dir": "r"}},
    ),
    "http": ("127.0.0.1:9999", "127.0.0.1:9999", lambda s, v: _http(s).port, 9999),
    "tokens_file": ("{tmp}/tokens.txt", "{tmp}/tokens.txt", lambda s, v: _http(s).tokens, None),
    "max_body_bytes": ("123", 123, lambda s, v: _http(s).max_body_bytes, 123),
    "max_result_bytes": ("0", 0, lambda s, v: s[0].server.max_result_bytes, None),
    "plain_wait_s": ("12.5", 12.5, lambda s, v: s[0].server.plain_wait_s, 12.5),
    "linger": ("0", False, lambda s, v: s[0].server.linger, False),
    "rate_limit": ("7", 7, lambda s, v: _http(s).rate_per_minute, 7),
    "max_unfinished_per_principal": (
        "3",
        3,
        lambda s, v: s[0].server.max_unfinished_per_principal,
        3,
    ),
    "max_sessions_per_principal": (
        "4",
        4,
        lambda s, v: _http(s).max_sessions_per_principal,
        4,
    ),
    "session_idle_s": ("60", 60, lambda s, v: _http(s).session_idle_s, 60),
    "header_timeout_s": ("2.5", 2.5, lambda s, v: _http(s).header_timeout_s, 2.5),
    "oauth_issuer": (
        "https://other.example",
        "https://other.example",
        lambda s, v: _oauth(s).issuer,
        "https://other.example",
    ),
    "oauth_audience": (
        "https://b.example/mcp",
        "https://b.example/mcp",
        lambda s, v: _oauth(s).audience,
        "https://b.example/mcp",
    ),
    "oauth_jwks_url": (
        "https://id.example.com/k",
        "https://id.example.com/k",
        lambda s, v: _oauth(s).jwks_url,
        "https://id.example.com/k",
    ),
    "oauth_algorithms": ("ES256", "ES256", lambda s, v: _oauth(s).algorithms, ("ES256",)),
    "oauth_leeway_s": ("5", 5, lambda s, v: _oauth(s).leeway_s, 5),
    "oauth_scopes": ("a,b", "a b", lambda s, v: _oauth(s).scopes, ("a", "b")),
    "max_runs": ("7", 7, lambda s, v: s[0].worker.max_runs, 7),
    "metrics": ("127.0.0.1:9464", "127.0.0.1:9464", lambda s, v: v["metrics"], "127.0.0.1:9464"),
    "log_format": ("json", "json", lambda s, v: v["log_format"], "json"),
    "log_level": ("debug", "debug", lambda s, v: v["log_level"], "debug"),
}
"""One example per setting: a new setting without one fails the first test."""

BASE = {"http": "127.0.0.1:8765", "oauth_issuer": ISSUER, "oauth_audience": AUDIENCE}
"""What the serve examples need besides the setting under test (the OAuth fields are read
only when issuer and audience are both given, and only over HTTP)."""


def test_every_setting_has_an_example() -> None:
    assert set(EXAMPLES) == set(BY_NAME)


def _filled(text: Any, tmp: Path) -> Any:
    return text.replace("{tmp}", str(tmp)) if isinstance(text, str) else text


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return str(value)


def _project_file(setting: Setting[Any], value: Any, base: dict[str, str]) -> str:
    if setting.name == "settings":
        return "".join(
            f"[settings.{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in table.items())
            for name, table in value.items()
        )
    tables: dict[str, list[str]] = {"": [], "serve": [], "worker": []}
    tables[setting.section].append(f"{setting.name} = {_toml(value)}")
    for name, text in base.items():
        tables[BY_NAME[name].section].append(f"{name} = {_toml(text)}")
    lines = tables[""]
    for section in ("serve", "worker"):
        if tables[section]:
            lines += [f"[{section}]", *tables[section]]
    return "\n".join(lines) + "\n"


def _parse(command: click.Command, argv: list[str]) -> Values:
    with command.make_context(str(command.name), argv) as ctx:
        return Values(ctx.params)


@pytest.mark.parametrize("way", ["flag", "variable", "project file"])
@pytest.mark.parametrize("name", list(BY_NAME))
def test_each_setting_reaches_its_field_by_flag_variable_and_project_file(
    name: str, way: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setting = BY_NAME[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_CONFIG", raising=False)
    for other in SETTINGS:
        monkeypatch.delenv(other.variable, raising=False)
    monkeypatch.setenv("TASKLOOM_TOKENS", "")
    (tmp_path / "tokens.txt").write_text(f"ann:{SECRET}\n")
    text, value, reached, expected = EXAMPLES[name]
    text, value, expected = (_filled(part, tmp_path) for part in (text, value, expected))
    if name == "tokens_file":
        expected = {SECRET: "ann"}
    if name == "db":
        expected = Path(expected)
    command = serve if "serve" in setting.commands else worker
    base = {key: text for key, text in BASE.items() if key != name} if command is serve else {}
    argv = [arg for key, text in base.items() for arg in (BY_NAME[key].flag, text)]
    if way == "flag":
        flag = setting.flag if setting.kind is not bool else f"--no-{setting.flag[2:]}"
        values = _parse(command, [*argv, flag] + ([] if setting.kind is bool else [text]))
    elif way == "variable":
        monkeypatch.setenv(setting.variable, text)
        values = _parse(command, argv)
    else:
        (tmp_path / "taskloom.toml").write_text(_project_file(setting, value, {}))
        values = _parse(command, argv)
    settings: Settings = (
        process_settings(values) if command is serve else (worker_settings(values), None)
    )
    assert reached(settings, values) == expected


def test_each_setting_is_a_row_of_the_docs_table_and_of_its_fields() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for setting in SETTINGS:
        key = setting.project_key
        row = f"| `{setting.flag}` | `{setting.variable}` | `{key}` |"
        assert row in page, row
        for fill in setting.fills:
            field = fill.partition(".")[2]
            rows = [line for line in page.splitlines() if line.startswith(f"| `{field}` |")]
            assert any(setting.flag in line and setting.variable in line for line in rows), fill


def test_a_stated_default_is_the_fields_own() -> None:
    """Where the table states a default (the model is costly to import for ``--help``),
    it is the model's."""
    from taskloom.persistence.postgres import PostgresSettings
    from taskloom.persistence.sqlite import SqliteSettings

    wait = BY_NAME["store_wait_s"].default
    assert wait == SqliteSettings.model_fields["store_wait_s"].default
    assert wait == PostgresSettings.model_fields["store_wait_s"].default
    assert Path(BY_NAME["db"].default) == DEFAULT_DATABASE


def _keys(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


def unreachable(
    command: click.Command, config: type[BaseModel], table: type[BaseModel]
) -> list[str]:
    """The flags of *command* whose name, without its dashes, the project file's *table*
    (or its top level, *config*) does not take."""
    names = [
        param.name
        for param in command.params
        if isinstance(param, click.Option) and param.name not in ("help", "version")
    ]
    return [name for name in names if name and name not in _keys(table) | _keys(config)]


def test_every_serve_and_worker_flag_is_a_project_file_key() -> None:
    """docs/cli.md: ``[serve]`` takes "the serve flags, without their dashes"."""
    assert unreachable(serve, ProjectConfig, ServeConfig) == []
    assert unreachable(worker, ProjectConfig, WorkerConfig) == []


def test_a_key_removed_from_the_project_model_is_found() -> None:
    fields = {
        name: (field.annotation, field)
        for name, field in ServeConfig.model_fields.items()
        if name != "plain_wait_s"
    }
    from pydantic import create_model

    without = create_model("WithoutPlainWait", **fields)  # type: ignore[call-overload]
    assert unreachable(serve, ProjectConfig, without) == ["plain_wait_s"]


def _documented_flags(page: str) -> set[str]:
    return set(re.findall(r"`(--[a-z][a-z-]+)", (ROOT / "docs" / page).read_text()))


def test_every_serve_key_the_docs_name_can_be_set_from_the_project_file() -> None:
    """The serve flags docs/cli.md and docs/server.md document, and the keys of the
    project file docs/cli.md shows, are all keys the project file takes."""
    serve_flags = {
        option: param.name
        for param in serve.params
        if isinstance(param, click.Option) and param.name != "version"
        for option in (*param.opts, *param.secondary_opts)
    }
    documented = (_documented_flags("cli.md") | _documented_flags("server.md")) & set(serve_flags)
    assert "--plain-wait-s" in documented
    keys = _keys(ServeConfig) | _keys(ProjectConfig)
    assert sorted(flag for flag in documented if serve_flags[flag] not in keys) == []
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    example = cli.split("### The project file", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    config = ProjectConfig.model_validate(tomllib.loads(example))
    assert config.serve.http == "127.0.0.1:8765"  # type: ignore[attr-defined]


def _leaves(command: click.Command, path: str = "") -> list[tuple[str, click.Command]]:
    if isinstance(command, click.Group):
        return [
            leaf
            for name, child in command.commands.items()
            for leaf in _leaves(child, f"{path} {name}".strip())
        ]
    return [(path, command)]


def _dispatched(command: click.Command) -> str | None:
    """The ``module:function`` string the command's callback hands to ``dispatch``."""
    assert command.callback is not None
    tree = ast.parse(textwrap.dedent(inspect.getsource(command.callback)))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dispatch"
            and isinstance(node.args[0], ast.Constant)
        ):
            return str(node.args[0].value)
    return None


def test_every_dispatch_string_names_a_handler_of_the_commands_shape() -> None:
    """Each command's ``module:function`` resolves to an async function of one parameter,
    whose class holds exactly the command's parameters (a typo, a renamed handler or a
    flag the handler does not know fails here, not at run time)."""
    from taskloom.cli import app
    from taskloom.commands.dispatch import resolve

    checked = []
    for path, command in _leaves(app):
        handler = _dispatched(command)
        if handler is None:
            assert path == "ui", f"{path} does not dispatch"  # runs its own server loop
            continue
        function, kind = resolve(handler)
        assert inspect.iscoroutinefunction(function), handler
        names = {param.name for param in command.params if param.name != "version"}
        if kind is Values:
            assert names == {setting.name for setting in SETTINGS if path in setting.commands}
        else:
            assert dataclasses.is_dataclass(kind), handler
            assert kind.__dataclass_params__.frozen, handler  # type: ignore[attr-defined]
            assert {field.name for field in dataclasses.fields(kind)} == names, handler
        checked.append(path)
    assert len(checked) >= 20
