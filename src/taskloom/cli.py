"""The ``taskloom`` command (click). Every flag can also be set by a ``TASKLOOM_*``
variable, and by the project file (``taskloom.toml`` or ``[tool.taskloom]``) below both.

``taskloom serve [--db PATH|URL] [--workflows MODULE|FILE.py] [--settings JSON|@FILE]
[--http HOST:PORT]`` serves MCP over stdio or Streamable HTTP; the other commands (run,
tasks, workflows, db, worker, tokens) are in :mod:`taskloom.commands.app`. A user
mistake (a bad flag, a module that does not import, a file that is not a taskloom
database) is one line on stderr and exit code 2, never a traceback.
"""

import logging
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

import click

from taskloom import __version__
from taskloom.cli_http import http_options
from taskloom.commands import options
from taskloom.commands.app import COMMANDS, NAMES
from taskloom.commands.base import EXIT_CANCELLED, EXIT_USAGE, Args, first_taskloom_error

if TYPE_CHECKING:
    from taskloom.config import TaskloomSettings
    from taskloom.server.http import HttpSettings

USAGE_ERROR: Final = EXIT_USAGE
logger = logging.getLogger("taskloom.serve")
CONTEXT: Final = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(
    "taskloom",
    context_settings=CONTEXT,
    invoke_without_command=True,
    help="Durable tasks for the Model Context Protocol.",
)
@click.pass_context
def app(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:
        raise click.UsageError(f"choose a command: {', '.join(('serve', *NAMES))}")


@app.command(
    "serve",
    short_help="serve MCP over stdio (or Streamable HTTP with --http)",
    help="Serve the workflows as MCP tools over stdin and stdout, or over Streamable HTTP "
    "with --http. Ctrl-C or SIGTERM stops it; runs in flight resume elsewhere.",
)
@options.db
@options.store_wait
@options.workflows
@options.settings
@http_options
@options.logging_options
def serve(**params: Any) -> None:
    _serve(Args(**params))


for _command in COMMANDS:
    app.add_command(_command)


def _add_version(command: click.Command) -> None:
    """``--version`` on *command* and on every command under it."""
    click.version_option(__version__, message="taskloom %(version)s")(command)
    if isinstance(command, click.Group):
        for child in command.commands.values():
            _add_version(child)


_add_version(app)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the command line; exits with the command's code, or 2 on a user mistake (one
    line on stderr)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        code = app.main(arguments, prog_name="taskloom", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as error:
        group = error.ctx.command if error.ctx is not None else app
        names = group.list_commands(error.ctx) if isinstance(group, click.Group) else []
        _mistake(f"choose a command: {', '.join(names)}")
    except click.UsageError as error:
        _mistake(error.format_message() + _where(error))
    except click.ClickException as error:
        _mistake(error.format_message())
    except click.Abort:
        sys.stderr.write("taskloom: interrupted\n")
        sys.exit(EXIT_CANCELLED)
    except (Exception, BaseExceptionGroup) as error:
        mistake = first_taskloom_error(error)
        if mistake is None:
            raise
        _mistake(str(mistake))
    sys.exit(code if isinstance(code, int) else 0)


def _where(error: click.UsageError) -> str:
    """Where a bad value came from when it was not the command line (a variable, the
    project file), else where to read about the command."""
    ctx = error.ctx
    if ctx is None:
        return ""
    param = getattr(error, "param", None)
    if isinstance(param, click.Option) and param.name is not None:
        source = ctx.get_parameter_source(param.name)
        if source is click.core.ParameterSource.ENVIRONMENT and param.envvar:
            return f" (from {param.envvar})"
        if source is click.core.ParameterSource.DEFAULT:
            return " (from the project file)"
    return f" (see: {ctx.command_path} --help)" if ctx.command is not app else ""


def _mistake(message: str) -> NoReturn:
    sys.stderr.write(f"taskloom: error: {message}\n")
    sys.exit(USAGE_ERROR)


def _serve(args: Args) -> None:
    import anyio

    from taskloom.cli_http import http_settings, server_settings
    from taskloom.commands.common import operator_settings, workflow_modules
    from taskloom.commands.options import setup_logging
    from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
    from taskloom.engine.errors import TaskloomError
    from taskloom.persistence.factory import database_settings

    http = http_settings(args)
    settings = TaskloomSettings(
        database=database_settings(args.db, store_wait_s=args.store_wait_s),
        workflow_modules=(*BUILTIN_WORKFLOWS, *workflow_modules(args.workflows)),
        workflow_settings=operator_settings(args),
        server=server_settings(args),
        exposure="network" if http is not None else "local",
    )
    setup_logging(args.log_format, args.log_level)
    try:
        text = args.log_format == "text"
        anyio.run(serve_until_stopped, settings, http, text, backend="asyncio")
    except KeyboardInterrupt:
        sys.exit(130)
    except (TaskloomError, BaseExceptionGroup) as error:
        mistake = first_taskloom_error(error)
        if mistake is None:
            raise
        _mistake(str(mistake))


async def serve_until_stopped(
    settings: "TaskloomSettings", http: "HttpSettings | None", text: bool = True
) -> None:
    """Serve stdio (until stdin closes) or HTTP, until SIGINT or SIGTERM: then the engine
    stops, and the runs in flight are handed back to resume from their checkpoints. Where
    it serves, and why it stops, are lines on stderr (*text*) or INFO log records."""
    import anyio

    from taskloom.bootstrap import serve_http, serve_stdio

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
                if sys.stdin.isatty():  # a person, not a host: say it is not hung
                    _say(
                        text,
                        "taskloom: serving MCP over stdio, waiting for a host on stdin"
                        " (Ctrl-C stops)",
                    )
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
