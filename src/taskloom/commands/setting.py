"""A setting of ``taskloom serve`` or ``taskloom worker``, as the setting table declares
it (:mod:`taskloom.commands.setting_table`, ADR 0044), and the values click parsed for
them. Only the standard library is imported here, and the help reads nothing else: each
default is stated in the table (a test keeps it equal to its model field's), so
``serve --help`` imports no settings model.
"""

from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar, cast

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Section = Literal["", "serve", "worker"]

MODELS: Final = {
    "TaskloomSettings": "taskloom.config",
    "ServerSettings": "taskloom.server.settings",
    "HttpSettings": "taskloom.server.http.settings",
    "OAuthSettings": "taskloom.server.http.oauth_settings",
    "WorkerSettings": "taskloom.engine.worker",
    "SqliteSettings": "taskloom.persistence.sqlite.settings",
    "PostgresSettings": "taskloom.persistence.postgres.settings",
}
"""Where each settings model a setting fills is defined (by name: the command line imports
a model only when it builds the settings)."""


@dataclass(frozen=True, kw_only=True)
class Setting(Generic[T_co]):
    """One setting: its name is the project-file key, and gives the flag and variable;
    *kind* is the type of its value (``bool``: a ``--x/--no-x`` switch; ``list``: a
    repeatable flag)."""

    name: str
    kind: type[T_co]
    help: str
    commands: tuple[str, ...] = ("serve",)
    section: Section = "serve"
    """The project file's table for it (``""``: the top level)."""
    metavar: str | None = None
    fills: tuple[str, ...] = ()
    """The settings fields it sets (``Model.field``); the first gives the help's default."""
    to_field: bool = True
    """Whether the value goes into the one field it fills as it is (else a builder in
    :mod:`taskloom.commands.serve_settings` makes the field from it)."""
    zero: str | None = None
    """What 0 means (the field is ``None`` then), e.g. ``no limit``."""
    list_of_names: bool = False
    """A comma- or space-separated list (a tuple in the field)."""
    default: Any = None
    """The value when neither the flag, nor its variable, nor the project file gives one,
    as the flag would give it (``None``: none); :meth:`value` of it is the default of the
    field it fills (``tests/cli/test_setting_table.py`` checks each)."""
    shown_default: str | None = None
    """How the help says the default, where the value alone would not."""
    note: str | None = None
    """What the docs add to its flag, e.g. ``added to the built-ins``."""
    choices: tuple[str, ...] = ()
    """The values it may take (any case), if only some."""
    positive: bool = False
    """Whether the flag refuses 0 and below (a number)."""
    project_default: bool = True
    """Whether the flag's default is its project-file key (else the command reads the
    key itself, as it has another shape)."""

    @property
    def repeatable(self) -> bool:
        """A flag that may be repeated (a list in the project file)."""
        return self.kind is list

    @property
    def flag(self) -> str:
        """``--plain-wait-s``."""
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> str:
        """The flag as click declares it: ``--linger/--no-linger`` for a switch."""
        return f"{self.flag}/--no-{self.flag[2:]}" if self.kind is bool else self.flag

    @property
    def variable(self) -> str:
        """``TASKLOOM_PLAIN_WAIT_S``."""
        return "TASKLOOM_" + self.name.upper()

    @property
    def key(self) -> str:
        """The project-file key: ``serve.plain_wait_s``, or ``db`` at the top level."""
        return f"{self.section}.{self.name}" if self.section else self.name

    @property
    def field(self) -> tuple[str, str] | None:
        """``(model, field)`` when the value goes into one field as it is."""
        if not self.to_field or len(self.fills) != 1:
            return None
        model, _, name = self.fills[0].partition(".")
        return model, name

    def value(self, given: Any) -> Any:
        """The field's value for the *given* flag value (``None``: not given)."""
        if self.zero is not None and given == 0:
            return None
        if self.list_of_names and isinstance(given, str):
            return tuple(part for part in given.replace(",", " ").split() if part)
        return given

    @property
    def project_key(self) -> str:
        """The key as the project file shows it: ``[serve] plain_wait_s``, ``db``."""
        if not self.project_default:
            return f"[{self.name}.NAME]"
        return f"[{self.section}] {self.name}" if self.section else self.name

    def help_text(self) -> str:
        """The help line: what it does, its variable, its project-file key, its default."""
        default = self.shown_default if self.shown_default is not None else _shown(self.default)
        where = f"env {self.variable}; project file {self.project_key}"
        return f"{self.help} ({where}" + (f"; default {default}" if default else "") + ")"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple | list):
        return ",".join(str(part) for part in value)
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return "" if value is None else str(value)


class Values(dict[str, Any]):
    """The flag values of ``serve`` or ``worker``, by setting name, as click parsed them
    (``None``: not given anywhere). The settings builders turn them into the typed models
    (:mod:`taskloom.commands.serve_settings`); a handler reads one with :meth:`of`."""

    def of(self, setting: Setting[T]) -> T | None:
        """The value of *setting* (``None``: not given; its field keeps its default)."""
        return cast("T | None", self.get(setting.name))

    def given(self, setting: Setting[T]) -> T:
        """The value of *setting*, which has a default here, so is never ``None``."""
        value = self.of(setting)
        if value is None:
            raise ValueError(f"{setting.flag} has no value")
        return value
