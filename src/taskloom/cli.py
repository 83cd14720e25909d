"""The ``taskloom`` command (click). Every flag can also be set by a ``TASKLOOM_*``
variable, and by the project file (``taskloom.toml`` or ``[tool.taskloom]``) below both.

The commands (serve, run, tasks, workflows, db, worker, tokens, ui) are in
:mod:`taskloom.commands.app`, their handlers in :mod:`taskloom.commands`. A user
mistake (a bad flag, a module that does not import, a file that is not a taskloom
database) is one line on stderr and exit code 2, never a traceback.
"""

import sys
from collections.abc import Sequence
from typing import Final, NoReturn

import click

from taskloom import __version__
from taskloom.commands.app import COMMANDS, NAMES
from taskloom.commands.base import EXIT_CANCELLED, EXIT_USAGE, CommandError, first_taskloom_error
from taskloom.commands.log_scope import logging_kept
from taskloom.commands.options import FromProject

USAGE_ERROR: Final = EXIT_USAGE
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
        raise click.UsageError(f"choose a command: {', '.join(NAMES)}")


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
    line on stderr). The logging its command set up ends with it: the root logger's
    handlers and level are given back (:mod:`taskloom.commands.log_scope`)."""
    with logging_kept():
        _run(list(sys.argv[1:] if argv is None else argv))


def _run(arguments: list[str]) -> NoReturn:
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
        if source is click.core.ParameterSource.DEFAULT and _from_project_file(param):
            return " (from the project file)"
    return f" (see: {ctx.command_path} --help)" if ctx.command is not app else ""


def _from_project_file(param: click.Option) -> bool:
    """Whether *param*'s default came from the project file (not taskloom's own)."""
    default = param.default
    if not isinstance(default, FromProject):
        return False
    try:
        return default.given()
    except CommandError:  # a project file that does not load: it said so itself
        return False


def _mistake(message: str) -> NoReturn:
    sys.stderr.write(f"taskloom: error: {message}\n")
    sys.exit(USAGE_ERROR)
