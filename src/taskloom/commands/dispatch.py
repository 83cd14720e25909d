"""Running a command's async handler: exit codes, and one line for a user mistake."""

import importlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

import anyio

from taskloom.commands.base import (
    EXIT_CANCELLED,
    EXIT_OK,
    EXIT_USAGE,
    Args,
    first_taskloom_error,
)

Handler = Callable[[Args], Awaitable[int]]


def dispatch(handler: str, params: Mapping[str, Any]) -> NoReturn:
    """Run *handler* (``module:function`` under ``taskloom.commands``, imported only now,
    so ``--help`` loads no engine or store) on the parsed *params* and exit with its code;
    a user mistake is one line on stderr and exit code 2, an interruption exit code 130."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        module, _, name = handler.partition(":")
        function: Handler = getattr(importlib.import_module(f"taskloom.commands.{module}"), name)
        code: int = anyio.run(function, Args(**params), backend="asyncio")
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
        print(f"taskloom: error: {mistake}", file=sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)
