"""What every command shares: flags that default to ``TASKLOOM_*`` variables, opening the
database without a worker, reading JSON arguments and printing JSON."""

import argparse
import json
import os
import sys
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
from pydantic import JsonValue

from taskloom.config import BUILTIN_WORKFLOWS, DEFAULT_DATABASE, TaskloomSettings
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import RunStore
from taskloom.observability.logs import LOG_FORMATS, LOG_LEVELS, LogFormat, configure_logging
from taskloom.persistence.factory import DurableStore, database_settings
from taskloom.persistence.factory import open_store as open_any_store
from taskloom.persistence.postgres import is_postgres_url
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore
from taskloom.validation import JsonSchemaValidator

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""The task failed (or ``db check`` found a problem)."""
EXIT_USAGE: Final = 2
"""A user mistake: bad flag, unknown task or workflow, bad JSON, unusable database."""
EXIT_CANCELLED: Final = 130
"""The task was cancelled, or the command was interrupted (Ctrl-C)."""

_TRUE: Final = frozenset({"1", "true", "yes", "on"})


class CommandError(TaskloomError):
    """A user mistake found by a command; its message is the one line shown."""


def env(name: str, default: str | None = None) -> str | None:
    """The value of ``TASKLOOM_<name>`` if set and not empty, else *default*."""
    return os.environ.get(f"TASKLOOM_{name}") or default


def env_flag(name: str) -> bool:
    """``TASKLOOM_<name>`` as a boolean (1, true, yes or on)."""
    return (env(name) or "").strip().lower() in _TRUE


def env_int(name: str, default: int) -> str:
    """``TASKLOOM_<name>`` or *default*, as the text of an ``int`` option's default:
    argparse converts it, so a bad value is reported like a bad flag."""
    return env(name) or str(default)


def split_names(value: str) -> list[str]:
    """``"a, b c"`` as ``["a", "b", "c"]``."""
    return [part for part in value.replace(",", " ").split() if part]


def add_db(parser: argparse.ArgumentParser) -> None:
    """``--db PATH|URL`` (``TASKLOOM_DB``): an SQLite file or a ``postgresql://`` URL."""
    parser.add_argument(
        "--db",
        default=env("DB") or str(DEFAULT_DATABASE),
        metavar="PATH|URL",
        help="SQLite database file or postgresql:// URL (env TASKLOOM_DB; default %(default)s)",
    )


def add_logging(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json`` (``TASKLOOM_LOG_FORMAT``) and ``--log-level LEVEL``
    (``TASKLOOM_LOG_LEVEL``), applied by :func:`setup_logging`."""
    parser.add_argument(
        "--log-format",
        type=_one_of(LOG_FORMATS, "LOG_FORMAT"),
        default=env("LOG_FORMAT", "text"),
        metavar="text|json",
        help="log lines as text or JSON lines (env TASKLOOM_LOG_FORMAT; default text)",
    )
    parser.add_argument(
        "--log-level",
        type=_one_of(LOG_LEVELS, "LOG_LEVEL"),
        default=env("LOG_LEVEL", "warning"),
        metavar="LEVEL",
        help="debug, info (task and node lifecycle), warning or error "
        "(env TASKLOOM_LOG_LEVEL; default warning)",
    )


def setup_logging(args: argparse.Namespace) -> None:
    """Configure the process's logging as :func:`add_logging`'s flags say."""
    log_format: LogFormat = "json" if args.log_format == "json" else "text"
    configure_logging(log_format, args.log_level)


def _one_of(choices: tuple[str, ...], variable: str) -> Callable[[str], str]:
    """An argparse type accepting *choices* (case-insensitive); it also checks the value
    of ``TASKLOOM_<variable>``, which argparse passes through it as the default."""

    def check(value: str) -> str:
        if value.lower() not in choices:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not one of {', '.join(choices)} (flag or TASKLOOM_{variable})"
            )
        return value.lower()

    return check


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json`` (``TASKLOOM_JSON=1``)."""
    parser.add_argument(
        "--json",
        action="store_true",
        default=env_flag("JSON"),
        help="print JSON instead of text (env TASKLOOM_JSON=1)",
    )


def add_workflows(parser: argparse.ArgumentParser) -> None:
    """``--workflows MODULE ...`` (``TASKLOOM_WORKFLOWS``)."""
    parser.add_argument(
        "--workflows",
        nargs="+",
        default=split_names(env("WORKFLOWS", "") or ""),
        metavar="MODULE",
        help="modules whose workflows to load, besides the built-in ones "
        "(env TASKLOOM_WORKFLOWS, comma-separated)",
    )


def add_settings(parser: argparse.ArgumentParser) -> None:
    """``--settings JSON|@FILE`` (``TASKLOOM_SETTINGS``): operator settings by workflow."""
    parser.add_argument(
        "--settings",
        default=env("SETTINGS"),
        metavar="JSON|@FILE",
        help='operator settings by workflow, e.g. \'{"command_matrix": {"allowed_programs": '
        '["make"]}}\', or @FILE: a JSON file, or a TOML file (.toml) with a table per '
        "workflow (env TASKLOOM_SETTINGS)",
    )


def read_workflow_settings(text: str | None) -> dict[str, Any]:
    """The operator settings by workflow that ``--settings`` gives: JSON text, ``@FILE``
    of JSON, or ``@FILE.toml`` with one table per workflow (``[repo_audit]``).

    Raises:
        CommandError: the file cannot be read, or it is not an object of objects.
    """
    if text is None:
        return {}
    by_workflow: dict[str, Any]
    if text.startswith("@") and text.endswith(".toml"):
        try:
            by_workflow = tomllib.loads(Path(text[1:]).read_text())
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read --settings from {text[1:]}: {error}") from None
        except tomllib.TOMLDecodeError as error:
            raise CommandError(f"--settings {text[1:]} is not valid TOML: {error}") from None
    else:
        by_workflow = read_json_object(
            text, "--settings", '{"repo_audit": {"reports_dir": "reports"}}'
        )
    if not all(isinstance(values, dict) for values in by_workflow.values()):
        raise CommandError('--settings maps workflow names to objects, like {"repo_audit": {}}')
    return by_workflow


def settings_from(args: argparse.Namespace, **changes: Any) -> TaskloomSettings:
    """Engine settings for the database, workflow modules and workflow settings the flags
    name.

    Raises:
        CommandError: ``--settings`` is not an object of objects (JSON or TOML).
    """
    db = str(getattr(args, "db", DEFAULT_DATABASE))
    if not is_postgres_url(db) and Path(db).is_dir():
        raise CommandError(f"{db} is a directory; --db takes a database file")
    modules = getattr(args, "workflows", [])
    by_workflow = read_workflow_settings(getattr(args, "settings", None))
    return TaskloomSettings(
        database=database_settings(db),
        workflow_modules=(*BUILTIN_WORKFLOWS, *modules),
        workflow_settings=by_workflow,
        **changes,
    )


@dataclass(frozen=True)
class Local:
    """A database opened by a command: its tasks and its runs, and no worker."""

    manager: TaskManager
    runs: RunStore


LOCK_WAIT_MS: Final = 1_000
"""How long a command's SQLite connection waits for another process's lock..."""
LOCK_RETRY_S: Final = 1.0
"""...and how long it then retries, before saying the database is locked."""


@asynccontextmanager
async def open_store(
    db: str | Path, *, create: bool = False, read_only: bool = False
) -> AsyncIterator[DurableStore]:
    """Open the store *db* names, without taking a worker slot: an SQLite file, or a
    PostgreSQL database given by its URL. SQLite is opened *read_only* (never created,
    migrated or written) or else migrated; a lock held by another process is waited for
    about two seconds, then refused.

    Raises:
        CommandError: the file does not exist (unless *create*).
        PersistenceError: it is damaged, another application's, too new (or, read-only,
            too old), locked, or unreachable.
    """
    settings = database_settings(str(db))
    if not isinstance(settings, SqliteSettings):
        async with open_any_store(settings) as postgres_store:
            yield postgres_store
        return
    if not create and not await anyio.Path(settings.path).exists():
        raise CommandError(f"no taskloom database at {db} (pass --db PATH or set TASKLOOM_DB)")
    if await anyio.Path(settings.path).is_dir():
        raise CommandError(f"{db} is a directory; --db takes a database file")
    settings = settings.model_copy(
        update={
            "read_only": read_only,
            "busy_timeout_ms": LOCK_WAIT_MS,
            "lock_retry_s": LOCK_RETRY_S,
            "verify_on_open": not read_only,  # the full read is db check's job
        }
    )
    async with SqliteTaskStore.open(settings) as store:
        yield store


@asynccontextmanager
async def open_database(db: str | Path, *, read_only: bool = False) -> AsyncIterator[Local]:
    """Open an existing database *db* to read (*read_only*) or change tasks, without a
    worker."""
    async with open_store(db, read_only=read_only) as store:
        yield Local(manager=TaskManager(store, validator=JsonSchemaValidator()), runs=store)


def read_json(text: str, what: str) -> JsonValue:
    """*text* as JSON; ``@path`` reads a file and ``@-`` standard input.

    Raises:
        CommandError: the file cannot be read or the text is not JSON.
    """
    if text.startswith("@"):
        source = text[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {what} from {source}: {error}") from None
    try:
        value: JsonValue = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{what} is not valid JSON: {error}") from None
    return value


def read_json_object(text: str, what: str, example: str = '{"start": 5}') -> dict[str, JsonValue]:
    """Like :func:`read_json`, but the value must be a JSON object (like *example*)."""
    value = read_json(text, what)
    if not isinstance(value, dict):
        raise CommandError(f"{what} must be a JSON object, like {example}")
    return value


def print_json(value: Any) -> None:
    """*value* as indented JSON on standard output."""
    print(json.dumps(value, indent=2, ensure_ascii=False))


def task_json(task: Task) -> dict[str, Any]:
    """A task as JSON (every field, times in ISO-8601)."""
    return task.model_dump(mode="json")


def find_workflow(workflows: Mapping[str, Workflow[Any]], name: str) -> Workflow[Any]:
    """The workflow *name*.

    Raises:
        CommandError: none has this name (the message lists those that exist).
    """
    if name not in workflows:
        known = ", ".join(sorted(workflows)) or "none"
        raise CommandError(
            f"no workflow is named {name!r} (known: {known}; load others with --workflows MODULE)"
        )
    return workflows[name]


def first_taskloom_error(error: BaseException) -> TaskloomError | None:
    """The TaskloomError behind *error*, also from inside (nested) exception groups."""
    if isinstance(error, TaskloomError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = first_taskloom_error(inner)
            if found is not None:
                return found
    return None
