"""Which programs ``command_matrix`` may start: the allow-list rule, in one place.

An entry of ``allowed_programs`` is a bare name (``make``: the program of that name on
the worker's ``PATH``), an absolute path (``/usr/bin/make``: that file, links resolved),
or ``*`` (any program). A command's program is its ``argv[0]``:

- a bare name is allowed if it is listed as a name, or if it resolves on the worker's
  ``PATH`` (never the command's own ``env``) to a listed path;
- a path (any ``/`` in it, relative ones taken from the command's ``cwd``) is allowed
  only if it resolves to a listed path: a listed name never allows a path.

The program that runs is the one that was checked (its resolved absolute path).
"""

import os
import shutil
from collections.abc import Sequence
from typing import Final

ANY_PROGRAM: Final = "*"


class ProgramNotAllowedError(ValueError):
    """The operator's allow-list does not include this program."""


def check_entries(entries: Sequence[str]) -> tuple[str, ...]:
    """Validate allow-list entries: names, absolute paths or ``*``."""
    for entry in entries:
        if not entry or "\0" in entry:
            raise ValueError("an allowed program cannot be empty or contain NUL")
        if "/" in entry and not os.path.isabs(entry):
            raise ValueError(f"allowed program {entry!r}: a path must be absolute")
    return tuple(entries)


def resolve_program(program: str, allowed: Sequence[str], *, cwd: str | None = None) -> str:
    """The program to execute for *program* (``argv[0]``), if *allowed* permits it.

    Raises:
        ProgramNotAllowedError: it is not allowed (the message says why).
    """
    found = _locate(program, cwd)
    if ANY_PROGRAM in allowed:
        return found or program
    names = {entry for entry in allowed if "/" not in entry}
    if "/" not in program and program in names:
        return found or program  # not on PATH: starting it fails, and says so
    paths = {os.path.realpath(entry) for entry in allowed if "/" in entry}
    if found is not None and os.path.realpath(found) in paths:
        return found
    if "/" in program:
        raise ProgramNotAllowedError(
            f"program {program!r} is not allowed (a path must resolve to an absolute path "
            "listed in allowed_programs)"
        )
    raise ProgramNotAllowedError(f"program {program!r} is not in allowed_programs")


def _locate(program: str, cwd: str | None) -> str | None:
    """The absolute path *program* names (a relative ``cwd`` is the worker's)."""
    found = os.path.join(cwd or "", program) if "/" in program else shutil.which(program)
    return os.path.abspath(found) if found is not None else None
