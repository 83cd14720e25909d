"""The cursor of the store's connections: a statement's text converted once (ADR 0074).

psycopg turns a statement's ``%(name)s`` placeholders into PostgreSQL's ``$1`` at every
execution: it encodes the text and splits it with a regular expression, caching the
result only for a text of at most 4,096 bytes and 50 parameters (meant for an ORM's
statements of varying lengths). The claim's statement (``sql/leases.py``) is some
9,000 bytes, so each claim paid for the split, and for hashing a new 9,000-byte key to
find its prepared statement. The store's statements are a small set of texts: here
every text with parameters is converted once and kept (the last ``CONVERSIONS`` texts)
up to ``LONGEST`` characters and ``MOST_PARAMETERS`` parameters, which bounds what is
kept (a text beyond them is converted by psycopg as before); the conversion itself is
psycopg's.

This leans on two private names of psycopg 3.3 (pinned below 3.4 in ``pyproject.toml``):
a cursor's ``_query_cls``, and ``_queries._query2pg_nocache``, the conversion psycopg
caches itself. A patch release may change them (3.1.11 added the second), so they are
checked when this module is imported: if either is missing, or a sample statement
converted here differs from psycopg's own conversion of it, :data:`CONVERTING` is false
and :data:`Cursor` is psycopg's own ``AsyncCursor`` (slower for the claim, otherwise the
same). ``tests/integration/test_postgres_statement_binding.py`` fails then.
"""

from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

import psycopg
from psycopg import _queries
from psycopg.adapt import Transformer

CONVERSIONS: Final = 128
"""How many statement texts a process keeps converted (as many as psycopg keeps)."""
LONGEST: Final = 65_536
"""The longest text kept converted, in characters (psycopg: 4,096 bytes)."""
MOST_PARAMETERS: Final = 200
"""The most parameters of a text kept converted (psycopg: 50)."""

_query2pg_nocache: Callable[[bytes, str], Any] | None = getattr(_queries, "_query2pg_nocache", None)


@lru_cache(maxsize=CONVERSIONS)
def _converted(query: str, encoding: str) -> tuple[bytes, list[Any], list[str] | None, list[Any]]:
    """*query* encoded and converted by psycopg: the text to send, the parameters'
    formats, their names in order, and the parts (shared by every execution, as the
    results of psycopg's own cache are)."""
    assert _query2pg_nocache is not None  # (CONVERTING is false otherwise)
    bytes_, formats, order, parts = _query2pg_nocache(query.encode(encoding), encoding)
    return bytes_, formats, order, parts


class _Query(_queries.PostgresQuery):
    """psycopg's query, whose text with parameters is converted through :func:`_converted`."""

    __slots__ = ()

    def convert(self, query: Any, vars: Any) -> None:  # (psycopg's signature)
        if (
            vars is None
            or type(query) is not str
            or len(query) > LONGEST
            or len(vars) > MOST_PARAMETERS
        ):
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _converted(
            query, self._tx.encoding
        )
        self.dump(vars)


def _agrees() -> bool:
    """Whether psycopg still has the names this module uses, and a sample statement (named,
    repeated and positional placeholders, text and binary, a ``%%``) converted here binds
    exactly what psycopg's own conversion binds."""
    if _query2pg_nocache is None:
        return False
    if getattr(psycopg.AsyncCursor, "_query_cls", None) is not _queries.PostgresQuery:
        return False
    samples: tuple[tuple[str, Any], ...] = (
        ("SELECT %(a)s, %(b)b, %(a)s, '%%' || %(c)t", {"a": 1, "b": "é", "c": [1, None]}),
        ("SELECT %s, %b, '%%'", (2, "x")),
    )
    try:
        for text, parameters in samples:
            ours, theirs = _Query(Transformer()), _queries.PostgresQuery(Transformer())
            ours.convert(text, parameters)
            theirs.convert(text, parameters)
            seen = [(q.query, list(q.params or ()), q.types, q.formats) for q in (ours, theirs)]
            if seen[0] != seen[1]:
                return False
    except Exception:  # noqa: BLE001 (any failure: psycopg's own conversion, as before)
        return False
    finally:
        _converted.cache_clear()
    return True


CONVERTING: Final = _agrees()
"""Whether :data:`Cursor` converts each text once (else psycopg changed: see the module)."""


class _ConvertingCursor(psycopg.AsyncCursor[Any]):
    """psycopg's async cursor, converting each statement's text once (see the module)."""

    _query_cls = _Query


Cursor: Final[type[psycopg.AsyncCursor[Any]]] = (
    _ConvertingCursor if CONVERTING else psycopg.AsyncCursor
)
"""The cursor of the store's connections."""
