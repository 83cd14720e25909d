"""The ``taskloom`` command. Every flag can also be set by a ``TASKLOOM_*`` variable.

``taskloom serve [--db PATH|URL] [--workflows MODULE ...] [--settings JSON|@FILE]
[--http HOST:PORT]`` serves MCP over stdio or Streamable HTTP; the other
commands (run, tasks, workflows, db, worker) are in :mod:`taskloom.commands`. A user
mistake (a bad flag, a module that does not import, a file that is not a taskloom
database) is one line on stderr and exit code 2, never a traceback.
"""

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

import anyio

from taskloom import __version__
from taskloom.bootstrap import serve_http, serve_stdio
from taskloom.cli_http import add_http_options, http_settings, server_settings
from taskloom.commands import NAMES, dispatch, register
from taskloom.commands.common import (
    CommandError,
    add_db,
    add_logging,
    add_settings,
    read_workflow_settings,
    setup_logging,
)
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.engine.errors import TaskloomError
from taskloom.persistence.factory import database_settings
from taskloom.server.http import HttpSettings

USAGE_ERROR = 2
logger = logging.getLogger("taskloom.serve")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="taskloom", description="Durable tasks for the Model Context Protocol.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve = commands.add_parser(
        "serve",
        help="serve MCP over stdio (or Streamable HTTP with --http)",
        description="Serve the workflows as MCP tools over stdin and stdout, or over "
        "Streamable HTTP with --http.",
    )
    add_db(serve)
    serve.add_argument(
        "--workflows",
        nargs="+",
        default=_split(os.environ.get("TASKLOOM_WORKFLOWS", "")),
        metavar="MODULE",
        help="modules whose workflows to serve, besides the built-in ones "
        "(env TASKLOOM_WORKFLOWS, comma-separated)",
    )
    add_settings(serve)
    add_http_options(serve)
    add_logging(serve)
    ui = commands.add_parser("ui", help="serve the web dashboard of a database (read-only)")
    add_db(ui)
    ui.add_argument("--host", default=os.environ.get("TASKLOOM_UI_HOST", "127.0.0.1"))
    ui.add_argument("--port", type=int, default=int(os.environ.get("TASKLOOM_UI_PORT", "8780")))
    ui.add_argument("--allow-actions", action="store_true", help="cancel, answer and resume too")
    ui.add_argument(
        "--workflows", nargs="+", default=_split(os.environ.get("TASKLOOM_WORKFLOWS", ""))
    )
    register(commands)
    add_version(parser)
    return parser


def add_version(parser: argparse.ArgumentParser) -> None:
    """``--version`` on *parser* and on every sub-command under it."""
    parser.add_argument("--version", action="version", version=f"taskloom {__version__}")
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                add_version(child)


def _split(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line; exits with 0, or 2 on a user mistake."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error(f"choose a command: {', '.join(('serve', *NAMES))}")
    if args.command == "ui":
        from taskloom.commands.ui import serve_dashboard

        tokens = os.environ.get("TASKLOOM_TOKENS", "")
        sys.exit(
            serve_dashboard(
                args.db,
                host=args.host,
                port=args.port,
                allow_actions=args.allow_actions,
                workflows=args.workflows,
                tokens=tokens,
            )
        )
    if args.command != "serve":
        dispatch(args, parser)
    http = http_settings(parser, args)
    try:
        settings = TaskloomSettings(
            database=database_settings(args.db),
            workflow_modules=(*BUILTIN_WORKFLOWS, *args.workflows),
            workflow_settings=read_workflow_settings(args.settings),
            server=server_settings(parser, args),
            exposure="network" if http is not None else "local",
        )
    except CommandError as error:
        parser.exit(USAGE_ERROR, f"taskloom: error: {error}\n")
    setup_logging(args)
    try:
        text = args.log_format == "text"
        anyio.run(serve_until_stopped, settings, http, text, backend="asyncio")
    except KeyboardInterrupt:
        sys.exit(130)
    except (TaskloomError, BaseExceptionGroup) as error:
        mistake = _taskloom_error(error)
        if mistake is None:
            raise
        parser.exit(USAGE_ERROR, f"taskloom: error: {mistake}\n")


async def serve_until_stopped(
    settings: TaskloomSettings, http: HttpSettings | None, text: bool = True
) -> None:
    """Serve stdio (until stdin closes) or HTTP, until SIGINT or SIGTERM: then the engine
    stops, and the runs in flight are handed back to resume from their checkpoints. Where
    it serves, and why it stops, are lines on stderr (*text*) or INFO log records."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                async for received in signals:
                    name = signal.Signals(received).name
                    _say(text, f"taskloom: {name}: stopping; runs in flight resume elsewhere")
                    group.cancel_scope.cancel()
                    return

            group.start_soon(stop_on_signal)
            if http is None:
                await serve_stdio(settings)
            else:
                port = await group.start(serve_http, settings, http)
                url = http.model_copy(update={"port": port}).url
                _say(text, f"taskloom: serving MCP at {url} (Ctrl-C stops)")
                await anyio.sleep_forever()
            group.cancel_scope.cancel()  # stdin closed


def _say(text: bool, line: str) -> None:
    if text:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    else:
        logger.info(line.removeprefix("taskloom: "))


def _taskloom_error(error: BaseException) -> TaskloomError | None:
    """The TaskloomError behind *error*, also from inside (nested) exception groups."""
    if isinstance(error, TaskloomError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _taskloom_error(inner)
            if found is not None:
                return found
    return None
