"""The operator's commands besides ``serve``: run, tasks, workflows, db and worker.

Each module adds its sub-commands to the parser; every handler is an async function of
the parsed arguments that returns the exit code (see ``common.EXIT_*``).
"""

import argparse
import logging
import os
import sys
from typing import Any, NoReturn

import anyio

from taskloom.commands import (
    db,
    run,
    tasks_change,
    tasks_delete,
    tasks_read,
    tokens,
    worker,
    workflows,
)
from taskloom.commands.common import (
    EXIT_CANCELLED,
    EXIT_OK,
    EXIT_USAGE,
    add_db,
    add_json,
    add_workflows,
    first_taskloom_error,
)

NAMES = ("run", "tasks", "workflows", "db", "worker", "tokens")


def register(commands: "argparse._SubParsersAction[Any]") -> None:
    """Add every command to the ``taskloom`` parser's sub-commands."""
    run.register(commands)
    group = commands.add_parser(
        "tasks", help="list, inspect, cancel, answer, resume, delete and purge tasks"
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    tasks_read.register(actions)
    tasks_change.register(actions)
    tasks_delete.register(actions)
    for parser in actions.choices.values():
        add_db(parser)
        add_json(parser)
        add_workflows(parser)
    workflows.register(commands)
    db.register(commands)
    worker.register(commands)
    tokens.register(commands)


def dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> NoReturn:
    """Run the chosen command and exit with its code; a user mistake is one line on
    stderr and exit code 2, an interruption exit code 130."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        code: int = anyio.run(args.handler, args, backend="asyncio")
    except KeyboardInterrupt:
        print("taskloom: interrupted", file=sys.stderr)
        code = EXIT_CANCELLED
    except BrokenPipeError:  # e.g. `taskloom tasks list | head`: the reader has enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    except (Exception, BaseExceptionGroup) as error:
        mistake = first_taskloom_error(error)
        if mistake is None:
            raise
        parser.exit(EXIT_USAGE, f"taskloom: error: {mistake}\n")
    sys.exit(code)
