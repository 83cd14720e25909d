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
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    wrap: Collection[str] = (),
    squeeze: Collection[str] = (),
    show_header: bool = True,
) -> None:
    """*rows* under *headers*: fitted to a terminal's width, the *wrap* columns wrapped
    and the *squeeze* ones cut (``…``), one row a line; plain aligned lines otherwise."""
    if not sys.stdout.isatty():
        lines = table([list(headers), *[list(row) for row in rows]])
        print("\n".join(lines if show_header else lines[1:]))
        return
    from rich.table import Table

    out = console()
    grid = Table(
        box=None,
        pad_edge=False,
        show_edge=False,
        padding=(0, 2, 0, 0),
        show_header=show_header,
    )
    widths = [
        max([len(header), *(len(row[column]) for row in rows)])
        for column, header in enumerate(headers)
    ]
    fixed = sum(
        width for width, header in zip(widths, headers, strict=True) if header not in squeeze
    )
    room = max(out.width - fixed - 2 * (len(headers) - 1), 8)
    for header, width in zip(headers, widths, strict=True):
        flexible = header in wrap or header in squeeze
        grid.add_column(
            header,
            header_style="bold",
            no_wrap=not flexible,
            overflow="fold" if flexible else "ellipsis",
            min_width=None if flexible else width,  # kept whole: the flexible ones give way
        )
    cut = {column for column, header in enumerate(headers) if header in squeeze}
    for row in rows:
        grid.add_row(
            *[_cut(cell, room) if column in cut else cell for column, cell in enumerate(row)]
        )
    out.print(grid)


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"
