"""Issue 27, items 2 and 4: every setting of ``serve`` and ``worker`` is declared once, and
reaches its field four ways: its flag, its variable, its project-file key, and a row of
the docs table. The docs' promise that ``[serve]`` takes "the serve flags, without their
dashes" is checked against the command itself (ADR 0044)."""

import ast
import dataclasses
import importlib
import inspect
import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from pydantic import BaseModel, ValidationError

from taskloom.commands import project_model, setting_table
from taskloom.commands import serve as serve_command
from taskloom.commands import worker as worker_command
from taskloom.commands.app import serve, worker
from taskloom.commands.common import operator_settings
from taskloom.commands.project_model import ProjectConfig, ServeConfig, WorkerConfig
from taskloom.commands.serve import process_settings
from taskloom.commands.setting import MODELS, Setting, Values
from taskloom.commands.setting_table import (
    BY_NAME,
    DB,
    HTTP,
    LOG_FORMAT,
    LOG_LEVEL,
    METRICS,
    SETTINGS,
    STORE_WAIT_S,
)
from taskloom.commands.worker import worker_settings
from taskloom.config import BUILTIN_WORKFLOWS, DEFAULT_DATABASE, TaskloomSettings
from taskloom.observability.logs import LOG_FORMATS, LOG_LEVELS
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server.http import HttpSettings

ROOT = Path(__file__).resolve().parents[2]
ISSUER = "https://id.example.com/tenant"
AUDIENCE = "https://mcp.example.com/mcp"
SECRET = "s3cret-token-of-ann-1234"

Settings = tuple[TaskloomSettings, HttpSettings | None]
Used = dict[str, Any]
"""What the handler of ``serve`` or ``worker`` handed to what uses a setting that fills no
field: ``setup_logging`` (``log_format``, ``log_level``), ``metrics_endpoint``."""


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


EXAMPLES: dict[str, tuple[str, Any, Callable[[Settings, Used], Any], Any]] = {
    # name: (flag and variable text, project-file value, what it reached, expected): what
    # it reached is read from the settings built, or from what the handler handed on
    "db": ("{tmp}/x.db", "{tmp}/x.db", lambda s, u: _path(s), "{tmp}/x.db"),
    "store_wait_s": ("2.5", 2.5, lambda s, u: s[0].database.store_wait_s, 2.5),
    "workflows": (
        "my.flows",
        ["my.flows"],
        lambda s, u: s[0].workflow_modules[-1],
        "my.flows",
    ),
    "settings": (
        '{"repo_audit": {"reports_dir": "r"}}',
        {"repo_audit": {"reports_dir": "r"}},
        lambda s, u: s[0].workflow_settings,
        {"repo_audit": {"reports_dir": "r"}},
    ),
    "http": ("127.0.0.1:9999", "127.0.0.1:9999", lambda s, u: _http(s).port, 9999),
    "tokens_file": ("{tmp}/tokens.txt", "{tmp}/tokens.txt", lambda s, u: _http(s).tokens, None),
    "max_body_bytes": ("123", 123, lambda s, u: _http(s).max_body_bytes, 123),
    "max_result_bytes": ("0", 0, lambda s, u: s[0].server.max_result_bytes, None),
    "plain_wait_s": ("12.5", 12.5, lambda s, u: s[0].server.plain_wait_s, 12.5),
    "linger": ("0", False, lambda s, u: s[0].server.linger, False),
    "rate_limit": ("7", 7, lambda s, u: _http(s).rate_per_minute, 7),
    "max_unfinished_per_principal": (
        "3",
        3,
        lambda s, u: s[0].server.max_unfinished_per_principal,
        3,
    ),
    "max_sessions_per_principal": (
        "4",
        4,
        lambda s, u: _http(s).max_sessions_per_principal,
        4,
    ),
    "session_idle_s": ("60", 60, lambda s, u: _http(s).session_idle_s, 60),
    "header_timeout_s": ("2.5", 2.5, lambda s, u: _http(s).header_timeout_s, 2.5),
    "oauth_issuer": (
        "https://other.example",
        "https://other.example",
        lambda s, u: _oauth(s).issuer,
        "https://other.example",
    ),
    "oauth_audience": (
        "https://b.example/mcp",
        "https://b.example/mcp",
        lambda s, u: _oauth(s).audience,
        "https://b.example/mcp",
    ),
    "oauth_jwks_url": (
        "https://id.example.com/k",
        "https://id.example.com/k",
        lambda s, u: _oauth(s).jwks_url,
        "https://id.example.com/k",
    ),
    "oauth_algorithms": ("ES256", "ES256", lambda s, u: _oauth(s).algorithms, ("ES256",)),
    "oauth_leeway_s": ("5", 5, lambda s, u: _oauth(s).leeway_s, 5),
    "oauth_scopes": ("a,b", "a b", lambda s, u: _oauth(s).scopes, ("a", "b")),
    "max_runs": ("7", 7, lambda s, u: s[0].worker.max_runs, 7),
    "metrics": ("127.0.0.1:9464", "127.0.0.1:9464", lambda s, u: u["metrics"], "127.0.0.1:9464"),
    "log_format": ("JSON", "json", lambda s, u: u["log_format"], "json"),
    "log_level": ("debug", "DEBUG", lambda s, u: u["log_level"], "debug"),
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


class _Stopped(Exception):
    """Raised where the worker's handler would start serving metrics."""


def _handed(command: click.Command, values: Values, monkeypatch: pytest.MonkeyPatch) -> Used:
    """Run the handler of *command* (``serve``, ``worker``) on *values* up to where it
    would start serving; what it handed to the logging set-up and the metrics endpoint."""
    used: Used = {}

    def logging_set_up(log_format: str, log_level: str) -> None:
        used.update(log_format=log_format, log_level=log_level)

    if command is serve:

        async def serve_until_stopped(*_args: Any, **_kwargs: Any) -> None:
            used["served"] = True

        monkeypatch.setattr(serve_command, "setup_logging", logging_set_up)
        monkeypatch.setattr(serve_command, "serve_until_stopped", serve_until_stopped)
        assert anyio.run(serve_command.serve, values) == 0
        assert used.pop("served")
        return used

    def metrics_endpoint(address: str | None) -> None:
        used["metrics"] = address
        raise _Stopped

    monkeypatch.setattr(worker_command, "setup_logging", logging_set_up)
    monkeypatch.setattr(worker_command, "metrics_endpoint", metrics_endpoint)
    with pytest.raises(_Stopped):
        anyio.run(worker_command.run_worker, values)
    return used


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
    assert reached(settings, _handed(command, values, monkeypatch)) == expected


def _commands(command: click.Command, path: str = "") -> dict[str, click.Command]:
    """Each command of the tree that runs, by its path (``tasks list``)."""
    if not isinstance(command, click.Group):
        return {path: command}
    found: dict[str, click.Command] = {}
    for name, child in command.commands.items():
        found |= _commands(child, f"{path} {name}".strip())
    return found


def _listed(cell: str, every: list[str]) -> set[str]:
    """The commands a cell of the docs table names: ``every command except `db ...`, `x y```
    or `` `serve`, `worker` `` (``db ...``: every command of ``db``)."""
    rest = cell.removeprefix("every command except ")
    names = {
        path
        for name in re.findall(r"`([^`]+)`", rest)
        for path in every
        if path == name or (name.endswith(" ...") and path.startswith(name[:-3]))
    }
    return set(every) - names if rest != cell else names


def test_each_setting_is_a_row_of_the_docs_table_and_of_its_fields() -> None:
    """Each row names the flag, variable and key; its commands column names exactly the
    commands that take the flag, as the command tree has them."""
    from taskloom.cli import app

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    tree = _commands(app)
    every = list(tree)
    for setting in SETTINGS:
        key = setting.project_key
        row = f"| `{setting.flags}` | `{setting.variable}` | `{key}` |"
        (line,) = [line for line in page.splitlines() if line.startswith(row)]
        taking = {
            path
            for path, command in tree.items()
            if any(setting.flag in param.opts for param in command.params)
        }
        assert _listed(line.split(" | ")[3], every) == taking, line
        assert {"serve", "worker"} & taking == set(setting.commands)
        for fill in setting.fills:
            field = fill.partition(".")[2]
            rows = [line for line in page.splitlines() if line.startswith(f"| `{field}` |")]
            assert any(setting.flags in line and setting.variable in line for line in rows), fill


def test_the_commands_of_the_shared_flags() -> None:
    """The docs once said ``serve, worker`` for ``--db``: they are on other commands too."""
    from taskloom.cli import app

    every = list(_commands(app))
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = [line.split(" | ") for line in page.splitlines() if line.startswith("| `--")]
    cells = {row[0]: row[3] for row in rows}
    assert _listed(cells["| `--db`"], every) == set(every) - {"workflows show"}
    assert {"run", "tasks list", "ui"} <= _listed(cells["| `--workflows`"], every)
    assert _listed(cells["| `--settings`"], every) == {"serve", "worker", "run", "tasks resume"}
    assert _listed(cells["| `--store-wait-s`"], every) == {"serve", "worker"}


def _model(name: str) -> type[BaseModel]:
    model: type[BaseModel] = getattr(importlib.import_module(MODELS[name]), name)
    return model


OTHER_DEFAULTS: dict[str, Callable[[], bool]] = {
    # a setting that fills no one field as it is: its stated default against what it gives
    "db": lambda: (
        Path(DB.default) == DEFAULT_DATABASE
        and TaskloomSettings().database == SqliteSettings(path=DEFAULT_DATABASE)
    ),
    "store_wait_s": lambda: (
        STORE_WAIT_S.default
        == _model("SqliteSettings").model_fields["store_wait_s"].default
        == _model("PostgresSettings").model_fields["store_wait_s"].default
    ),
    "workflows": lambda: (
        BY_NAME["workflows"].default is None
        and TaskloomSettings().workflow_modules == BUILTIN_WORKFLOWS
    ),
    "settings": lambda: (
        BY_NAME["settings"].default is None
        and operator_settings(None) == TaskloomSettings().workflow_settings == {}
    ),
    "http": lambda: HTTP.default is None,  # stdio
    "tokens_file": lambda: (
        BY_NAME["tokens_file"].default is None
        and _model("HttpSettings").model_fields["tokens"].get_default(call_default_factory=True)
        == {}
    ),
    "metrics": lambda: METRICS.default is None,  # no endpoint
    "log_format": lambda: LOG_FORMAT.default == "text" and LOG_FORMAT.choices == LOG_FORMATS,
    "log_level": lambda: LOG_LEVEL.default == "warning" and LOG_LEVEL.choices == LOG_LEVELS,
}


@pytest.mark.parametrize("name", list(BY_NAME))
def test_a_stated_default_is_the_fields_own(name: str) -> None:
    """Every default is stated in the table, so that ``--help`` imports no model; the
    field it fills has the same one (through :meth:`Setting.value`: ``0`` is ``None``,
    ``"a,b"`` a tuple)."""
    setting = BY_NAME[name]
    if setting.field is None:
        assert OTHER_DEFAULTS[name]()
        return
    model, field_name = setting.field
    field = _model(model).model_fields[field_name]
    expected = None if field.is_required() else field.get_default(call_default_factory=True)
    assert setting.value(setting.default) == expected
    assert setting.default is None or isinstance(setting.default, setting.kind)  # the flag's


def test_every_setting_without_one_field_has_its_default_checked() -> None:
    assert {s.name for s in SETTINGS if s.field is None} == set(OTHER_DEFAULTS)


PRECEDENCE: dict[str, tuple[Callable[[Settings], Any], Any]] = {
    # name: (what it reached, its default)
    "plain_wait_s": (lambda s: s[0].server.plain_wait_s, 45.0),
    "store_wait_s": (lambda s: s[0].database.store_wait_s, 5.0),
    "max_runs": (lambda s: s[0].worker.max_runs, 100),
}


@pytest.mark.parametrize("name", list(PRECEDENCE))
def test_a_flag_wins_over_its_variable_which_wins_over_the_project_file(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/configuration.md: flag > variable > project file > the field's default."""
    setting = BY_NAME[name]
    reached, default = PRECEDENCE[name]
    command = serve if "serve" in setting.commands else worker
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_CONFIG", raising=False)
    for other in SETTINGS:
        monkeypatch.delenv(other.variable, raising=False)

    def reach(*argv: str) -> Any:
        values = _parse(command, list(argv))
        return reached(
            process_settings(values) if command is serve else (worker_settings(values), None)
        )

    assert reach() == default
    (tmp_path / "taskloom.toml").write_text(_project_file(setting, 3, {}))
    assert reach() == 3
    monkeypatch.setenv(setting.variable, "2")
    assert reach() == 2
    assert reach(setting.flag, "1") == 1


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


def test_a_key_removed_from_the_project_model_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The product's ``[serve]`` model, built as it is (``section_model``) from a table
    that lacks ``plain_wait_s`` while the command keeps its flag: the check above finds
    the flag, and the project file refuses the key."""
    monkeypatch.setattr(
        setting_table, "SETTINGS", tuple(s for s in SETTINGS if s.name != "plain_wait_s")
    )
    without = project_model.section_model("ServeConfig", "serve", "[serve]", project_model.Table)
    assert unreachable(serve, ProjectConfig, without) == ["plain_wait_s"]
    with pytest.raises(ValidationError) as raised:
        without.model_validate({"plain_wait_s": 12.5})
    assert [error["type"] for error in raised.value.errors()] == ["extra_forbidden"]


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


def test_every_variable_a_flag_reads_is_in_its_help() -> None:
    """Each option that a ``TASKLOOM_*`` variable can set says so in its help, with that
    variable's own name (``options.flag`` writes it; ``tokens create --principal`` once
    read ``TASKLOOM_PRINCIPAL`` without saying so)."""
    from taskloom.cli import app

    context = click.Context(app)
    checked = 0
    for path, command in _commands(app).items():
        for param in command.params:
            if not isinstance(param, click.Option) or not param.envvar:
                continue
            record = param.get_help_record(context)
            assert record is not None, (path, param.name)
            assert f"(env {param.envvar}" in " ".join(record[1].split()), (path, param.name)
            checked += 1
    assert checked > 60  # every command's --db, --json, --workflows, and the rest


def test_serve_and_worker_own_their_process_and_freeze_its_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_CONFIG", raising=False)
    for setting in SETTINGS:
        monkeypatch.delenv(setting.variable, raising=False)
    served, _ = process_settings(_parse(serve, []))
    assert served.freeze_start_up  # ADR 0061; an embedded engine's default is off
    assert worker_settings(_parse(worker, [])).freeze_start_up
    assert not TaskloomSettings().freeze_start_up
    assert worker_settings(_parse(worker, [])).worker_only  # ADR 0062: hears only its work
    assert not served.worker_only  # a server follows tasks: it hears every change
