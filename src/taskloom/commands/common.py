"""What every command shares: its parsed flags, the engine settings they name, opening the
database without a worker, reading JSON arguments and printing JSON."""

import json
import shlex
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
from pydantic import JsonValue

from taskloom.commands import project
from taskloom.commands.base import EXIT_OK, CommandError
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.engine.dag import Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import RunStore
from taskloom.persistence.factory import DurableStore, database_settings
from taskloom.persistence.factory import open_store as open_any_store
from taskloom.persistence.postgres import is_postgres_url
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore
from taskloom.validation import JsonSchemaValidator

if TYPE_CHECKING:
    from taskloom.commands.arguments import Where


def split_names(value: str) -> list[str]:
    """``"a, b c"`` as ``["a", "b", "c"]``."""
    return [part for part in value.replace(",", " ").split() if part]


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
        import tomllib  # only for a TOML file (ADR 0071)

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


def operator_settings(text: str | None) -> dict[str, Any]:
    """``--settings`` (flag or ``TASKLOOM_SETTINGS``: *text*), else the project file's
    ``[settings]`` tables."""
    if text is not None:
        return read_workflow_settings(text)
    configured = project.configured("settings")
    return dict(configured) if configured else {}


def workflow_modules(entries: Sequence[str]) -> list[str]:
    """Module names for ``--workflows`` entries: a module (``mypkg.flows``) as it is, a
    ``.py`` file as the module of that name in its folder (put first on ``sys.path``).

    Raises:
        CommandError: a ``.py`` file that does not exist, or two files of one name
            (they would be one module).
    """
    modules = []
    files: dict[str, Path] = {}
    for entry in entries:
        if not entry.endswith(".py"):
            modules.append(entry)
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_file():
            raise CommandError(f"--workflows {entry}: no such file")
        other = files.setdefault(path.stem, path)
        if other != path:  # Python would import the first one twice
            raise CommandError(
                f"--workflows {other} and {path} are both the module {path.stem!r}: give "
                "the files different names (e.g. flows_v1.py and flows_v2.py)"
            )
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        modules.append(path.stem)
    return modules


def settings_from(
    db: str,
    workflows: Sequence[str],
    settings: str | None = None,
    *,
    store_wait_s: float | None = None,
    **changes: Any,
) -> TaskloomSettings:
    """Engine settings for the database, workflow modules and workflow settings (the
    ``--settings`` text) the flags (or the project file) name.

    Raises:
        CommandError: ``--settings`` is not an object of objects (JSON or TOML), or a
            workflow file does not exist.
    """
    if not is_postgres_url(db) and Path(db).is_dir():
        raise CommandError(f"{db} is a directory; --db takes a database file")
    modules = workflow_modules(workflows)
    return TaskloomSettings(
        database=database_settings(db, store_wait_s=store_wait_s),
        workflow_modules=(*BUILTIN_WORKFLOWS, *modules),
        workflow_settings=operator_settings(settings),
        **changes,
    )


@dataclass(frozen=True)
class Local:
    """A database opened by a command: its tasks and its runs, and no worker."""

    manager: TaskManager
    runs: RunStore


RECHECK_S: Final = 0.2
"""How often a command that waits reads the store again for changes made by another
process."""

LOCK_WAIT_MS: Final = 1_000
"""How long a command's SQLite connection waits for another process's lock..."""
LOCK_RETRY_S: Final = 1.0
"""...and how long it then retries, before saying the database is locked."""


@asynccontextmanager
async def open_store(
    db: str | Path, *, create: bool = False, read_only: bool = False
) -> AsyncIterator[DurableStore]:
    """Open the store *db* names, without taking a worker slot: an SQLite file, or a
    PostgreSQL database given by its URL. It is opened *read_only* (never created or
    migrated; an SQLite file never written either) or else migrated; a lock held by another process is waited for
    about two seconds, then refused.

    Raises:
        CommandError: the file does not exist (unless *create*).
        PersistenceError: it is damaged, another application's, too new (or, read-only,
            too old), locked, or unreachable.
    """
    settings = database_settings(str(db))
    if not isinstance(settings, SqliteSettings):
        async with open_any_store(settings, read_only=read_only) as postgres_store:
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


def show(as_json: bool, value: Any, text: str) -> int:
    """Print *value* as JSON (``--json``), else the line *text*; the exit code: done."""
    if as_json:
        print_json(value)
    else:
        print(text)
    return EXIT_OK


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


def again_flags(where: "Where") -> str:
    """The flags a printed command needs to work when copied as it is: ``--db`` and
    ``--workflows`` when they are not what the project file (or the default) gives."""
    from taskloom.commands.options import DEFAULT_DATABASE, from_project

    flags = ""
    if where.db != from_project("db", DEFAULT_DATABASE)():
        flags += f" --db {shlex.quote(str(where.db))}"
    entries = list(where.workflows)
    if entries != list(from_project("workflows")() or ()):
        for entry in entries:
            shown = str(Path(entry).resolve()) if entry.endswith(".py") else entry
            flags += f" --workflows {shlex.quote(shown)}"
    return flags
