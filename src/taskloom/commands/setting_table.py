"""Every setting of ``taskloom serve`` and ``taskloom worker``, declared once (ADR 0044).

One :class:`~taskloom.commands.setting.Setting` gives a setting's flag
(``--plain-wait-s``), its variable (``TASKLOOM_PLAIN_WAIT_S``), its project-file key
(``[serve] plain_wait_s``), the settings field it fills (``ServerSettings.plain_wait_s``)
its default, and its line in the docs (``scripts/docs_config.py`` writes
docs/configuration.md from it). The field's bounds and meaning stay in its pydantic
model; its default is stated here as well, so that ``--help`` imports no model, and
``tests/cli/test_setting_table.py`` checks that the two agree. The settings models never
import the command line (docs/adr/0002): the table names them, and the command line
imports them only when it builds the settings.
"""

from collections.abc import Iterator
from typing import Any, Final

from taskloom.commands.setting import Section, Setting

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
    note="added to the built-ins",
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
    note="`@FILE.toml`: a TOML file, a table per workflow",
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
    default=100,
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
    help="debug, info (lifecycle and audit records), warning or error",
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
        default=1_048_576,
    ),
    Setting(
        name="max_result_bytes",
        help="largest result, as JSON; 0: no limit",
        kind=int,
        metavar="N",
        fills=("ServerSettings.max_result_bytes",),
        default=16_777_216,
        zero="no limit",
    ),
    Setting(
        name="plain_wait_s",
        help="how long a plain tools/call waits before answering that its task goes on; "
        "0: until the task ends",
        kind=float,
        metavar="SECONDS",
        fills=("ServerSettings.plain_wait_s",),
        default=45.0,
        zero="until the task ends",
    ),
    Setting(
        name="linger",
        help="when a stdio server's host leaves, a background worker finishes its unfinished tasks",
        kind=bool,
        fills=("ServerSettings.linger",),
        default=True,
    ),
    Setting(
        name="rate_limit",
        help="HTTP requests a minute per principal; 0: no limit",
        kind=float,
        metavar="PER_MINUTE",
        fills=("HttpSettings.rate_per_minute",),
        default=600.0,
        zero="no limit",
    ),
    Setting(
        name="max_unfinished_per_principal",
        help="unfinished tasks (queued, running, waiting for input) one named principal "
        "may have; more are refused at create; 0: no limit",
        kind=int,
        metavar="N",
        fills=("ServerSettings.max_unfinished_per_principal",),
        default=1000,
        zero="no limit",
    ),
    Setting(
        name="max_sessions_per_principal",
        help="open HTTP sessions one named principal may hold",
        kind=int,
        metavar="N",
        fills=("HttpSettings.max_sessions_per_principal",),
        default=100,
    ),
    Setting(
        name="session_idle_s",
        help="an HTTP session with no request in flight for this long is closed",
        kind=float,
        metavar="SECONDS",
        fills=("HttpSettings.session_idle_s",),
        default=300.0,
    ),
    Setting(
        name="header_timeout_s",
        help="a connection whose request head has not arrived within this is closed",
        kind=float,
        metavar="SECONDS",
        fills=("HttpSettings.header_timeout_s",),
        default=10.0,
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
        default="RS256,ES256",
        list_of_names=True,
    ),
    Setting(
        name="oauth_leeway_s",
        help="clock skew allowed on exp, nbf and iat",
        kind=float,
        metavar="SECONDS",
        fills=("OAuthSettings.leeway_s",),
        default=30.0,
    ),
    Setting(
        name="oauth_scopes",
        kind=str,
        help="scopes every token must carry",
        metavar="SCOPE,...",
        fills=("OAuthSettings.scopes",),
        default="",
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
