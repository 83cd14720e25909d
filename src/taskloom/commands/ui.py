"""``taskloom ui``: the web dashboard of a database, served alone (ADR 0030).

No worker and no MCP endpoint: it shows the tasks of the database and, with
``allow_actions``, cancels, answers and resumes them (a resumed task runs once a worker,
``serve`` or ``worker``, claims it). Read-only otherwise: SQLite is opened read-only.
"""

import signal
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import anyio
from pydantic import ValidationError

from taskloom.bootstrap import serve_ui
from taskloom.commands.base import first_taskloom_error
from taskloom.commands.common import workflow_modules
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.engine.errors import TaskloomError
from taskloom.persistence.factory import database_settings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server.http import HttpSettings, parse_tokens

USAGE_ERROR = 2


def serve_dashboard(
    db: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8780,
    allow_actions: bool = False,
    workflows: Sequence[str] = (),
    tokens: str = "",
) -> int:
    """Serve the dashboard of *db* on *host*:*port* until Ctrl-C or SIGTERM.

    *tokens* are ``principal:token`` entries (``TASKLOOM_TOKENS``); the database's own
    tokens count too. Without any, it serves loopback only, to the operator, who sees
    every task. *workflows* are modules whose workflows a resume needs (the built-in
    ones are always loaded). Returns the exit status: 0, 130 on Ctrl-C, or 2 after one
    line on stderr saying what is wrong.
    """
    try:
        database = database_settings(db)
        if isinstance(database, SqliteSettings) and not Path(database.path).is_file():
            return _error(f"no taskloom database at {db} (pass --db PATH or set TASKLOOM_DB)")
        settings = TaskloomSettings(
            database=database,
            workflow_modules=(*BUILTIN_WORKFLOWS, *workflow_modules(workflows)),
        )
        http = HttpSettings(
            host=host,
            port=port,
            tokens=parse_tokens(tokens, source="TASKLOOM_TOKENS"),
            stored_tokens=True,
        )
    except ValidationError as error:
        return _error(f"invalid {error.errors()[0]['loc'][0]}: {error.errors()[0]['msg']}")
    except ValueError as error:
        return _error(str(error))
    mode = "actions allowed" if allow_actions else "read-only"
    try:
        anyio.run(_serve, settings, http, allow_actions, mode, backend="asyncio")
    except KeyboardInterrupt:
        return 130
    except (TaskloomError, BaseExceptionGroup) as error:  # one line for a mistake
        mistake = first_taskloom_error(error)
        if mistake is None:
            raise
        return _error(str(mistake))
    return 0


async def _serve(
    settings: TaskloomSettings, http: HttpSettings, allow_actions: bool, mode: str
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:
            port = await group.start(partial(serve_ui, settings, http, allow_actions=allow_actions))
            host = f"[{http.host}]" if ":" in http.host else http.host
            print(
                f"taskloom: serving the dashboard at http://{host}:{port}/ui/ ({mode}; "
                "Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            async for _ in signals:
                group.cancel_scope.cancel()
                return


def _error(message: str) -> int:
    print(f"taskloom: error: {message}", file=sys.stderr)
    return USAGE_ERROR
