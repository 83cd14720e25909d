"""Running a command's async handler: exit codes, and one line for a user mistake."""

import importlib
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, get_type_hints

import anyio

from taskloom.commands.base import (
    EXIT_CANCELLED,
    EXIT_OK,
    EXIT_USAGE,
    first_taskloom_error,
)
from taskloom.commands.pipe import silence_stdout
from taskloom.commands.say import say

Handler = Callable[[Any], Awaitable[int]]
"""An async function of one parameter, typed by the class that holds the command's
flags (:mod:`taskloom.commands.arguments`), answering the exit code."""


def resolve(handler: str) -> tuple[Handler, type[Any]]:
    """The function *handler* (``module:function`` under ``taskloom.commands``) names, and
    the class of its one parameter."""
    module, _, name = handler.partition(":")
    function: Handler = getattr(importlib.import_module(f"taskloom.commands.{module}"), name)
    (parameter,) = inspect.signature(function).parameters
    kind: type[Any] = get_type_hints(function)[parameter]
    return function, kind


def dispatch(handler: str, params: Mapping[str, Any]) -> NoReturn:
    """Run *handler* (``module:function`` under ``taskloom.commands``, imported only now,
    so ``--help`` loads no engine or store) on the parsed *params* and exit with its code;
    a user mistake is one line on stderr and exit code 2, an interruption exit code 130."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        function, kind = resolve(handler)
        code: int = anyio.run(function, kind(**params), backend="asyncio")
        sys.stdout.flush()  # here, where a reader that left is caught, not at exit
    except KeyboardInterrupt:
        print("taskloom: interrupted", file=sys.stderr)
        code = EXIT_CANCELLED
    except BrokenPipeError:  # e.g. `taskloom tasks list | head`: the reader has enough
        silence_stdout()
        code = EXIT_OK
    except (Exception, BaseExceptionGroup) as error:
        if _only_broken_pipes(error):  # raised inside a store's task group
            silence_stdout()
            sys.exit(EXIT_OK)
        mistake = first_taskloom_error(error)
        if mistake is None:
            raise
        say(f"taskloom: error: {mistake}", sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)


def _only_broken_pipes(error: BaseException) -> bool:
    """True for a group (of groups) whose errors are all :class:`BrokenPipeError`."""
    if not isinstance(error, BaseExceptionGroup):
        return False
    _, rest = error.split(BrokenPipeError)
    return rest is None
