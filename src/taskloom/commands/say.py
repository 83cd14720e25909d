"""Messages for people that wrap at word boundaries on a terminal.

A terminal wraps a long line at its last column, in the middle of a word (``Ctrl-`` at
the end of one line, ``C`` on the next). On a terminal, :func:`say` wraps at spaces
instead (standard library ``textwrap``), the lines after the first indented; in a file
or a pipe the line is written whole, as scripts expect.
"""

import shutil
import sys
import textwrap
from typing import TextIO


def wrapped(text: str, width: int, indent: str = "  ") -> str:
    """*text* wrapped at spaces to *width* columns (a word longer than a line, a path or
    a command, stays whole), each line of *text* wrapped on its own."""
    return "\n".join(
        textwrap.fill(
            line,
            width=width,
            subsequent_indent=" " * (len(line) - len(line.lstrip())) + indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        if len(line) > width
        else line
        for line in text.split("\n")
    )


def say(text: str, stream: TextIO | None = None, indent: str = "  ") -> None:
    """Print *text* to *stream* (stdout), wrapped to the terminal's width if it is one."""
    stream = stream if stream is not None else sys.stdout
    if stream.isatty():
        text = wrapped(text, shutil.get_terminal_size().columns, indent)
    print(text, file=stream, flush=True)
