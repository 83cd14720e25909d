"""Writes behind a lease fence: a read that decides whether they may run.

Where the dialect folds the fence (:attr:`Dialect.folds_fence`: writable ``WITH`` and a
share-locking read), the fence, the writes and the answer are one statement: the fence
read first (``MATERIALIZED``, its lease row share-locked before any row is written), each
write guarded by what it allows, and one row returned whatever it says. Elsewhere the
fence is a statement of its own and the writes, unguarded, follow only if it allows them.
Either way the rule's own check raises the same error on the same fence row (ADR 0047).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Result, Script, Statement, ask

_ALLOWED = "EXISTS (SELECT FROM allowed)"


@dataclass(frozen=True)
class Fence:
    """A read of the lease (and what else the writes depend on) and its verdict."""

    columns: tuple[str, ...]
    """What the fence reads; the first is never NULL in a row it finds."""
    source: str
    """``FROM`` and ``WHERE`` (and the dialect's share lock) of the read."""
    allows: str
    """In SQL, when the writes may run, over the fence's column names: what *check* lets
    pass, no more and no less."""

    @property
    def read(self) -> str:
        """The fence as a ``SELECT``."""
        return f"SELECT {', '.join(self.columns)} FROM {self.source}"


@dataclass(frozen=True)
class Guard:
    """The condition fenced writes run under (none where the fence ran before them)."""

    condition: str = ""

    def where(self, condition: str) -> str:
        """*condition*, and the guard's."""
        return f"{condition} AND {self.condition}" if self.condition else condition

    def values(self, *values: str) -> str:
        """The source of an insert of one row of *values*, inserted only under the guard."""
        listed = ", ".join(values)
        return f"SELECT {listed} WHERE {self.condition}" if self.condition else f"VALUES ({listed})"


def fenced(
    d: Dialect,
    fence: Fence,
    check: Callable[[tuple[Any, ...] | None], None],
    writes: Callable[[Guard], tuple[Statement, ...]],
    parameters: Mapping[str, Any],
) -> Script[Result]:
    """Run *writes* if *fence* allows them; *check* raises on the fence's row (``None``
    when it finds none) when it does not. The fence and the writes bind *parameters*.
    Returns the result of the last write, which returns at most one row, its first column
    never NULL. One round trip where the dialect folds the fence, two where it only fuses
    writes, one per statement elsewhere."""
    if not d.folds_fence:
        found = yield from ask(Statement(fence.read, parameters))
        check(found.one())
        return (yield from ask(writes(Guard())))
    *first, last = statements = writes(Guard(_ALLOWED))
    assert all(each.parameters == parameters for each in statements)
    clauses = [
        f"fence AS MATERIALIZED ({fence.read})",
        f"allowed AS MATERIALIZED (SELECT 1 FROM fence WHERE {fence.allows})",
        *(f"s{index} AS ({each.text})" for index, each in enumerate(first)),
        f"written AS ({last.text})",
    ]
    found = yield from ask(
        Statement(
            f"WITH {', '.join(clauses)} SELECT f.*, w.* FROM (SELECT) AS one"
            " LEFT JOIN fence f ON true LEFT JOIN written w ON true",
            parameters,
        )
    )
    row = found.one()
    assert row is not None  # one row, whatever the fence says
    width = len(fence.columns)
    check(row[:width] if row[0] is not None else None)
    written = [row[width:]] if row[width] is not None else []
    return Result(written, len(written))
