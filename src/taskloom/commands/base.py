"""What every command shares and ``--help`` may import: exit codes and the error a command
raises for a user mistake (no engine, store or driver here)."""

from typing import Final

from taskloom.engine.errors import TaskloomError

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
"""The task failed (or ``db check`` found a problem)."""
EXIT_USAGE: Final = 2
"""A user mistake: bad flag, unknown task or workflow, bad JSON, unusable database."""
EXIT_CANCELLED: Final = 130
"""The task was cancelled, or the command was interrupted (Ctrl-C)."""


class CommandError(TaskloomError):
    """A user mistake found by a command; its message is the one line shown."""


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
