"""The flags several commands share, as click options. click reads each one's
``TASKLOOM_*`` variable itself; where neither the flag nor the variable is given, the
project file (:mod:`taskloom.commands.project`) gives the default, then taskloom does.
The flags of ``serve`` and ``worker`` are made from :mod:`taskloom.commands.setting_table`.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import click

from taskloom.commands import project, setting_table
from taskloom.commands.setting import Setting
from taskloom.commands.setting_table import DB, LOG_FORMAT, LOG_LEVEL, OPERATOR_SETTINGS, WORKFLOWS

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DATABASE: Final = str(DB.default)
"""``taskloom.config.DEFAULT_DATABASE`` (not imported here: it loads the SQLite driver)."""
LOG_FORMATS: Final = LOG_FORMAT.choices
LOG_LEVELS: Final = LOG_LEVEL.choices
"""As :mod:`taskloom.observability.logs` knows them (not imported here: ``--help`` stays
fast)."""


class FromProject:
    """A flag's default: the project file's *key*, else *fallback*."""

    def __init__(self, key: str, fallback: Any = None) -> None:
        self.key = key
        self.fallback = fallback

    def __call__(self) -> Any:
        value = project.configured(self.key)
        return self.fallback if value is None else value

    def given(self) -> bool:
        """Whether the project file gives the key (else the fallback is the default)."""
        return project.configured(self.key) is not None


def from_project(name: str, fallback: Any = None) -> FromProject:
    """A default that reads the project file's *name*, else *fallback*."""
    return FromProject(name, fallback)


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


def flag(
    *declarations: str, envvar: str, help: str, note: str = "", **kwargs: Any
) -> Callable[[F], F]:
    """A command's option that its variable *envvar* can also set, named once: the help
    ends with ``(env VARIABLE)`` (``=1`` for an on/off flag), then *note*."""
    on = "=1" if kwargs.get("is_flag") else ""
    return click.option(
        *declarations, envvar=envvar, help=f"{help} (env {envvar}{on}{note})", **kwargs
    )


def states(variable: str, choices: Sequence[str], help: str, more: str = "") -> Callable[[F], F]:
    """``--state STATE[,STATE]``: repeatable, each one of *choices*."""
    return flag(
        "--state",
        "state",
        multiple=True,
        envvar=variable,
        callback=one_of(choices),
        metavar="STATE[,STATE]",
        help=help,
        note=more,
    )


class SettingOption(click.Option):
    """A flag declared in :mod:`taskloom.commands.setting_table`; its help is written
    when it is shown."""

    def __init__(self, *args: Any, setting: Setting[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if self.help is None:
            self.help = self.setting.help_text()
        return super().get_help_record(ctx)


def _click_type(setting: Setting[Any]) -> Any:
    if setting.choices:
        return click.Choice(setting.choices, case_sensitive=False)
    if setting.positive:
        return click.FloatRange(min=0, min_open=True)
    return None if setting.kind in (bool, list) else setting.kind


def option(setting: Setting[Any]) -> Callable[[F], F]:
    """The click option of *setting*: its flag, its variable, and its project-file key
    (then the setting's own default) where neither is given."""
    return click.option(
        setting.flags,
        setting.name,
        cls=SettingOption,
        setting=setting,
        envvar=setting.variable,
        default=from_project(setting.key, setting.default)
        if setting.project_default
        else setting.default,
        type=_click_type(setting),
        metavar=setting.metavar,
        multiple=setting.repeatable,
        callback=split_values if setting.repeatable else None,
    )


def settings_of(command: str) -> Callable[[F], F]:
    """Every flag of *command* (``serve``, ``worker``) the setting table declares."""

    def decorate(function: F) -> F:
        for setting in reversed(tuple(setting_table.for_command(command))):
            function = option(setting)(function)
        return function

    return decorate


db: Final = option(DB)
"""``--db PATH|URL`` (``TASKLOOM_DB``; project ``db``)."""
workflows: Final = option(WORKFLOWS)
"""``--workflows MODULE|FILE.py`` (repeatable)."""
settings: Final = option(OPERATOR_SETTINGS)
"""``--settings JSON|@FILE``."""
log_format: Final = option(LOG_FORMAT)
"""``--log-format text|json``."""
log_level: Final = option(LOG_LEVEL)
"""``--log-level LEVEL``."""


def json_output(command: F) -> F:
    """``--json`` (``TASKLOOM_JSON=1``)."""
    return flag(
        "--json", "json", is_flag=True, envvar="TASKLOOM_JSON", help="print JSON instead of text"
    )(command)


def setup_logging(log_format: str, log_level: str) -> None:
    """Configure the process's logging as :func:`logging_options` say."""
    from taskloom.observability.logs import configure_logging

    configure_logging("json" if log_format == "json" else "text", log_level)
