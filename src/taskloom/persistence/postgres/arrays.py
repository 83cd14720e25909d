"""Array parameters whose element type is known before they are bound (ADR 0074).

The worker's batched statements bind one array per column (``%(name)b::kind[]``, ADR
0052, 0055, 0061). Given a plain ``list``, psycopg finds the element type by reading the
list at every execution: once to choose its dumper (``get_key``), once more to make it
(``upgrade``), for every array of every statement; for integers it reads the list twice
more, for its least and greatest value. A list of one of the classes here is dumped by a
dumper that declares its array type up front, as psycopg's own ``register_array`` makes
them: the list is read once, to write it.

The element types are the statements' casts: ``text``, ``int`` (sent as ``int8``, cast
by the server as psycopg's narrowest integer type was; a value beyond ``int8`` raises
``OverflowError`` here, where psycopg sent it as ``numeric``), ``timestamptz`` (aware
datetimes only) and ``bool``.
``None`` elements are ``NULL``\\ s. On a connection without :func:`register`, a typed list
is a list and psycopg reads it as before.
"""

from typing import Any, Final

from psycopg.adapt import AdaptersMap
from psycopg.postgres import types
from psycopg.types.array import ListBinaryDumper


class TypedArray(list[Any]):
    """A list bound as a PostgreSQL array of :attr:`element` (see :func:`register`)."""

    element: str = ""


class TextArray(TypedArray):
    element = "text"


class IntArray(TypedArray):
    element = "int8"


class TimeArray(TypedArray):
    element = "timestamptz"


class BoolArray(TypedArray):
    element = "bool"


_BY_KIND: Final[dict[str, type[TypedArray]]] = {
    "text": TextArray,
    "int": IntArray,
    "timestamptz": TimeArray,
    "bool": BoolArray,
}


def array_class(kind: str) -> type[TypedArray]:
    """The typed list for a statement's cast to ``kind[]`` (``text``, ``int``,
    ``timestamptz``, ``bool``).

    Raises:
        KeyError: no typed list for *kind*.
    """
    return _BY_KIND[kind]


def typed(kind: str, values: list[Any]) -> TypedArray:
    """*values* as the typed list for ``kind[]``."""
    return _BY_KIND[kind](values)


def _dumper(array: type[TypedArray]) -> type[ListBinaryDumper]:
    info = types[array.element]
    attributes = {"oid": info.array_oid, "element_oid": info.oid}
    return type(f"{array.__name__}BinaryDumper", (ListBinaryDumper,), attributes)


_DUMPERS: Final = {array: _dumper(array) for array in _BY_KIND.values()}


def register(adapters: AdaptersMap) -> None:
    """Bind the typed lists on *adapters* (a connection's) with their fixed types."""
    for array, dumper in _DUMPERS.items():
        adapters.register_dumper(array, dumper)
