"""Every setting of ``taskloom serve`` and ``taskloom worker``, declared once (ADR 0044).

One :class:`Setting` gives a setting's flag (``--plain-wait-s``), its variable
(``TASKLOOM_PLAIN_WAIT_S``), its project-file key (``[serve] plain_wait_s``), the settings
field it fills (``ServerSettings.plain_wait_s``) and its line in the docs
(``scripts/docs_config.py`` writes docs/configuration.md from it). The field's default,
bounds and meaning stay in its pydantic model; the help reads the default from there
when it is shown. Only the standard library is imported here: ``--help`` stays fast, and
the settings models never import the command line (docs/adr/0002).
"""

import importlib
from collections.abc import Iterator
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
"""Where each settings model a setting fills is defined (imported only when needed)."""


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
    """The default, where no model field holds it (or its model is costly to import; a
    test checks it equals the fields')."""
    shown_default: str | None = None
    """How the help says the default, where the value alone would not."""
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

    def model_default(self) -> Any:
        """The default of the first field it fills (imports that model)."""
        model, _, name = self.fills[0].partition(".")
        field = getattr(importlib.import_module(MODELS[model]), model).model_fields[name]
        return None if field.is_required() else field.get_default(call_default_factory=True)

    @property
    def project_key(self) -> str:
        """The key as the project file shows it: ``[serve] plain_wait_s``, ``db``."""
        if not self.project_default:
            return f"[{self.name}.NAME]"
        return f"[{self.section}] {self.name}" if self.section else self.name

    def help_text(self) -> str:
        """The help line: what it does, its variable, its project-file key, its default."""
        default = self.shown_default
        if default is None:
            value = self.default if self.default is not None or not self.fills else None
            if value is None and self.fills:
                value = self.model_default()
            default = _shown(value)
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


SHARED: Final = ("serve", "worker")

DB: Final = Setting(
    name="db",
    kind=str,
    help="SQLite database file or postgresql:// URL",
    commands=SHARED,
    section="",
    metavar="PATH|URL",
    fills=("TaskloomSettings.database", "SqliteSettings.path", "PostgresSettings.url"),
    to_field=False,
    default="taskloom.db",
)

STORE_WAIT_S: Final = Setting(
    name="store_wait_s",
    help="the longest a request waits for the database (down, locked, disk full) "
    "before it is answered 'store unavailable, retry later'",
    commands=SHARED,
    section="",
    kind=float,
    metavar="SECONDS",
    fills=("SqliteSettings.store_wait_s", "PostgresSettings.store_wait_s"),
    to_field=False,
    positive=True,
    default=5.0,
)

WORKFLOWS: Final[Setting[list[str]]] = Setting(
    name="workflows",
    kind=list,
    help="a module or .py file whose workflows to load besides the built-in ones; "
    "repeat or separate with commas",
    commands=SHARED,
    section="",
    metavar="MODULE|FILE.py",
    fills=("TaskloomSettings.workflow_modules",),
    to_field=False,
    shown_default="none",
)

OPERATOR_SETTINGS: Final = Setting(
    name="settings",
    kind=str,
    help='operator settings by workflow, e.g. \'{"command_matrix": {"allowed_programs": '
    '["make"]}}\', or @FILE: a JSON file, or a TOML file (.toml) with a table per '
    "workflow",
    commands=SHARED,
    section="",
    metavar="JSON|@FILE",
    fills=("TaskloomSettings.workflow_settings",),
    to_field=False,
    project_default=False,
    shown_default="none",
)

HTTP: Final = Setting(
    name="http",
    kind=str,
    help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    metavar="HOST:PORT",
    fills=("HttpSettings.host", "HttpSettings.port"),
    to_field=False,
    shown_default="stdio",
)

TOKENS_FILE: Final = Setting(
    name="tokens_file",
    kind=str,
    help="bearer tokens, one 'principal:token' a line (TASKLOOM_TOKENS holds such "
    "entries comma-separated)",
    metavar="PATH",
    fills=("HttpSettings.tokens",),
    to_field=False,
    shown_default="none",
)

MAX_RUNS: Final = Setting(
    name="max_runs",
    help="runs executed at once",
    commands=("worker",),
    section="worker",
    kind=int,
    metavar="N",
    fills=("WorkerSettings.max_runs",),
)

METRICS: Final = Setting(
    name="metrics",
    kind=str,
    help="serve Prometheus metrics at http://HOST:PORT/metrics",
    commands=("worker",),
    section="worker",
    metavar="HOST:PORT",
)

LOG_FORMAT: Final = Setting(
    name="log_format",
    kind=str,
    help="log lines as text or JSON lines",
    commands=SHARED,
    section="",
    choices=("text", "json"),
    default="text",
)

LOG_LEVEL: Final = Setting(
    name="log_level",
    kind=str,
    help="debug, info (task and node lifecycle), warning or error",
    commands=SHARED,
    section="",
    choices=("debug", "info", "warning", "error"),
    default="warning",
)

SETTINGS: Final[tuple[Setting[Any], ...]] = (
    DB,
    STORE_WAIT_S,
    WORKFLOWS,
    OPERATOR_SETTINGS,
    HTTP,
    TOKENS_FILE,
    Setting(
        name="max_body_bytes",
        help="largest HTTP request body",
        kind=int,
        metavar="N",
        fills=("HttpSettings.max_body_bytes",),
    ),
    Setting(
        name="max_result_bytes",
        help="largest result, as JSON; 0: no limit",
        kind=int,
        metavar="N",
        fills=("ServerSettings.max_result_bytes",),
        zero="no limit",
    ),
    Setting(
        name="plain_wait_s",
        help="how long a plain tools/call waits before answering that its task goes on; "
        "0: until the task ends",
        kind=float,
        metavar="SECONDS",
        fills=("ServerSettings.plain_wait_s",),
        zero="until the task ends",
    ),
    Setting(
        name="linger",
        help="when a stdio server's host leaves, a background worker finishes its unfinished tasks",
        kind=bool,
        fills=("ServerSettings.linger",),
    ),
    Setting(
        name="rate_limit",
        help="HTTP requests a minute per principal; 0: no limit",
        kind=float,
        metavar="PER_MINUTE",
        fills=("HttpSettings.rate_per_minute",),
        zero="no limit",
    ),
    Setting(
        name="max_unfinished_per_principal",
        help="unfinished tasks (queued, running, waiting for input) one named principal "
        "may have; more are refused at create; 0: no limit",
        kind=int,
        metavar="N",
        fills=("ServerSettings.max_unfinished_per_principal",),
        zero="no limit",
    ),
    Setting(
        name="max_sessions_per_principal",
        help="open HTTP sessions one named principal may hold",
        kind=int,
        metavar="N",
        fills=("HttpSettings.max_sessions_per_principal",),
    ),
    Setting(
        name="session_idle_s",
        help="an HTTP session with no request in flight for this long is closed",
        kind=float,
        metavar="SECONDS",
        fills=("HttpSettings.session_idle_s",),
    ),
    Setting(
        name="header_timeout_s",
        help="a connection whose request head has not arrived within this is closed",
        kind=float,
        metavar="SECONDS",
        fills=("HttpSettings.header_timeout_s",),
    ),
    Setting(
        name="oauth_issuer",
        kind=str,
        help="accept JWT access tokens of this issuer (its exact iss); needs --oauth-audience",
        metavar="URL",
        fills=("OAuthSettings.issuer",),
    ),
    Setting(
        name="oauth_audience",
        kind=str,
        help="this endpoint's public URL, e.g. https://mcp.example.com/mcp: the aud tokens "
        "must carry and the resource of its metadata",
        metavar="URL",
        fills=("OAuthSettings.audience",),
    ),
    Setting(
        name="oauth_jwks_url",
        kind=str,
        help="the issuer's keys",
        metavar="URL",
        fills=("OAuthSettings.jwks_url",),
        shown_default="the jwks_uri of the issuer's metadata",
    ),
    Setting(
        name="oauth_algorithms",
        kind=str,
        help="signature algorithms accepted, public-key ones only",
        metavar="ALG,...",
        fills=("OAuthSettings.algorithms",),
        list_of_names=True,
    ),
    Setting(
        name="oauth_leeway_s",
        help="clock skew allowed on exp, nbf and iat",
        kind=float,
        metavar="SECONDS",
        fills=("OAuthSettings.leeway_s",),
    ),
    Setting(
        name="oauth_scopes",
        kind=str,
        help="scopes every token must carry",
        metavar="SCOPE,...",
        fills=("OAuthSettings.scopes",),
        list_of_names=True,
        shown_default="none",
    ),
    MAX_RUNS,
    METRICS,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""Every setting of ``serve`` and ``worker``, in the order their help lists them."""

BY_NAME: Final = {setting.name: setting for setting in SETTINGS}


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


def for_command(command: str) -> Iterator[Setting[Any]]:
    """The settings of *command* (``serve``, ``worker``)."""
    return (setting for setting in SETTINGS if command in setting.commands)


def in_section(section: Section) -> Iterator[Setting[Any]]:
    """The settings whose project-file key is in *section*."""
    return (setting for setting in SETTINGS if setting.section == section)


def filling(model: str) -> Iterator[tuple[Setting[Any], str]]:
    """Each setting that fills a field of *model*, with the field's name."""
    for setting in SETTINGS:
        for fill in setting.fills:
            owner, _, field = fill.partition(".")
            if owner == model:
                yield setting, field
