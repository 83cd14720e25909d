"""The flags several commands share, as click options. click reads each one's
``TASKLOOM_*`` variable itself; where neither the flag nor the variable is given, the
project file (:mod:`taskloom.commands.project`) gives the default, then taskloom does.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import click

from taskloom.commands import project

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DATABASE: Final = "taskloom.db"
"""``taskloom.config.DEFAULT_DATABASE`` (not imported here: it loads the SQLite driver)."""
LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
"""As :mod:`taskloom.observability.logs` knows them (not imported here: ``--help`` stays
fast)."""


def from_project(name: str, fallback: Any = None) -> Callable[[], Any]:
    """A default that reads the project file's *name*, else *fallback*."""

    def default() -> Any:
        value = project.configured(name)
        return fallback if value is None else value

    return default


def split_values(_ctx: click.Context, _param: click.Parameter, values: Iterable[str]) -> list[str]:
    """A repeatable option's values, each of which may also hold several, comma- or
    space-separated (``--state failed,cancelled --state queued``)."""
    found: list[str] = []
    for value in values:
        found += [part for part in str(value).replace(",", " ").split() if part]
    return list(dict.fromkeys(found))


def one_of(choices: Sequence[str]) -> Callable[[click.Context, click.Parameter, Any], list[str]]:
    """Like :func:`split_values`, each value one of *choices*."""

    def check(ctx: click.Context, param: click.Parameter, values: Iterable[str]) -> list[str]:
        found = split_values(ctx, param, values)
        for value in found:
            if value not in choices:
                raise click.BadParameter(
                    f"{value!r} is not one of {', '.join(choices)}", ctx=ctx, param=param
                )
        return found

    return check


def db(command: F) -> F:
    """``--db PATH|URL`` (``TASKLOOM_DB``; project ``db``)."""
    return click.option(
        "--db",
        envvar="TASKLOOM_DB",
        default=from_project("db", DEFAULT_DATABASE),
        metavar="PATH|URL",
        help="SQLite database file or postgresql:// URL (env TASKLOOM_DB; "
        f"default: the project file's db, else {DEFAULT_DATABASE})",
    )(command)


DEFAULT_STORE_WAIT_S: Final = 5.0
"""``store_wait_s`` of the stores' settings (not imported here: ``--help`` stays fast)."""


def store_wait(command: F) -> F:
    """``--store-wait-s SECONDS`` (``TASKLOOM_STORE_WAIT_S``; project ``store_wait_s``)."""
    return click.option(
        "--store-wait-s",
        "store_wait_s",
        type=click.FloatRange(min=0, min_open=True),
        envvar="TASKLOOM_STORE_WAIT_S",
        default=from_project("store_wait_s", DEFAULT_STORE_WAIT_S),
        metavar="SECONDS",
        help="the longest a request waits for the database (down, locked, disk full) "
        "before it is answered 'store unavailable, retry later' (env "
        f"TASKLOOM_STORE_WAIT_S; default {DEFAULT_STORE_WAIT_S:g})",
    )(command)


def json_output(command: F) -> F:
    """``--json`` (``TASKLOOM_JSON=1``)."""
    return click.option(
        "--json",
        "json",
        is_flag=True,
        envvar="TASKLOOM_JSON",
        help="print JSON instead of text (env TASKLOOM_JSON=1)",
    )(command)


def workflows(command: F) -> F:
    """``--workflows MODULE|FILE.py`` (repeatable; ``TASKLOOM_WORKFLOWS``; project
    ``workflows``)."""
    return click.option(
        "--workflows",
        "workflows",
        multiple=True,
        envvar="TASKLOOM_WORKFLOWS",
        default=from_project("workflows"),
        callback=split_values,
        metavar="MODULE|FILE.py",
        help="a module or .py file whose workflows to load besides the built-in ones; "
        "repeat or separate with commas (env TASKLOOM_WORKFLOWS; default: the project "
        "file's workflows)",
    )(command)


def settings(command: F) -> F:
    """``--settings JSON|@FILE`` (``TASKLOOM_SETTINGS``; project ``[settings.NAME]``)."""
    return click.option(
        "--settings",
        envvar="TASKLOOM_SETTINGS",
        metavar="JSON|@FILE",
        help='operator settings by workflow, e.g. \'{"command_matrix": {"allowed_programs": '
        '["make"]}}\', or @FILE: a JSON file, or a TOML file (.toml) with a table per '
        "workflow (env TASKLOOM_SETTINGS; default: the project file's [settings.NAME])",
    )(command)


def logging_options(command: F) -> F:
    """``--log-format text|json`` and ``--log-level LEVEL`` (``TASKLOOM_LOG_FORMAT``,
    ``TASKLOOM_LOG_LEVEL``)."""
    command = click.option(
        "--log-level",
        envvar="TASKLOOM_LOG_LEVEL",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default=from_project("log_level", "warning"),
        help="debug, info (task and node lifecycle), warning or error "
        "(env TASKLOOM_LOG_LEVEL; default warning)",
    )(command)
    return click.option(
        "--log-format",
        envvar="TASKLOOM_LOG_FORMAT",
        type=click.Choice(LOG_FORMATS, case_sensitive=False),
        default=from_project("log_format", "text"),
        help="log lines as text or JSON lines (env TASKLOOM_LOG_FORMAT; default text)",
    )(command)


def setup_logging(log_format: str, log_level: str) -> None:
    """Configure the process's logging as :func:`logging_options` say."""
    from taskloom.observability.logs import configure_logging

    configure_logging("json" if log_format == "json" else "text", log_level)
