"""Writing for people with rich: tables that fit the terminal, colour only where it may.

On a terminal, tables are fitted to its width (long cells wrap) and coloured unless
``NO_COLOR`` is set; in a file or a pipe, each row is one plain line of aligned columns,
so ``grep`` and ``cut`` work, and no escape sequence is written.
"""

import sys
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, TextIO

from taskloom.commands.render import table

if TYPE_CHECKING:
    from rich.console import Console


def console(stream: TextIO | None = None) -> "Console":
    """A rich console on *stream* (stdout): rich itself honours ``NO_COLOR``, ``COLUMNS``
    and whether the stream is a terminal."""
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=False)


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, wrap: Collection[str] = ()
) -> None:
    """*rows* under *headers*: fitted and wrapped (the *wrap* columns) on a terminal,
    plain aligned lines otherwise."""
    if not sys.stdout.isatty():
        print("\n".join(table([list(headers), *[list(row) for row in rows]])))
        return
    from rich.table import Table

    grid = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
    for header in headers:
        grid.add_column(
            header,
            header_style="bold",
            no_wrap=header not in wrap,
            overflow="fold" if header in wrap else "ellipsis",
        )
    for row in rows:
        grid.add_row(*row)
    console().print(grid)
