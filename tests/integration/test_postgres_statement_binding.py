"""How the store's connections bind a statement (ADR 0074): its text converted once
whatever its length, and the batches' arrays bound as their declared types without
psycopg reading each list for its element type."""

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg._queries import _query2pg_nocache
from psycopg.types.array import BaseListDumper

from taskloom.persistence.postgres import (
    PostgresTaskStore,
    cursors,
    finishes,
    nodes,
    takes,
    updates,
)
from taskloom.persistence.postgres.arrays import (
    BoolArray,
    IntArray,
    TextArray,
    TimeArray,
    TypedArray,
    array_class,
    typed,
)
from tests import postgres


@pytest.fixture
async def store() -> AsyncIterator[PostgresTaskStore]:
    async with postgres.fresh_store() as opened:
        yield opened


async def test_typed_arrays_are_bound_as_their_types(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*_: object) -> Any:
        raise AssertionError("a typed array was read for its element type")

    monkeypatch.setattr(BaseListDumper, "_find_list_element", never)
    moment = datetime(2026, 11, 27, 15, 0, 1, 250, tzinfo=UTC)
    async with store._db.pool.connection() as connection:
        cursor = await connection.execute(
            "SELECT pg_typeof(%(t)b)::text, %(t)b::text[], pg_typeof(%(i)b)::text, %(i)b::int8[],"
            " %(m)b::timestamptz[], %(b)b::bool[], %(n)b::int[], %(e)b::text[]",
            {
                "t": TextArray(["a", None, "é'\"{}"]),
                "i": IntArray([1, None, 2**40]),
                "m": TimeArray([moment, None]),
                "b": BoolArray([True, False, None]),
                "n": typed("int", [None, None]),
                "e": array_class("text")(),
            },
        )
        row = await cursor.fetchone()
    assert row is not None
    assert row[0] == "text[]"
    assert row[1] == ["a", None, "é'\"{}"]
    assert row[2] == "bigint[]"
    assert row[3] == [1, None, 2**40]
    assert row[4] == [moment, None]
    assert row[5] == [True, False, None]
    assert row[6] == [None, None]
    assert row[7] == []


async def test_an_int_beyond_the_cast_is_refused_by_the_server(
    store: PostgresTaskStore,
) -> None:
    """As with psycopg's own choice of integer type: the server's cast refuses it."""
    async with store._db.pool.connection() as connection:
        cursor = await connection.execute("SELECT %(s)b::int[]", {"s": IntArray([7, None])})
        assert await cursor.fetchone() == ([7, None],)
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):
            await connection.execute("SELECT %(i)b::int[]", {"i": IntArray([2**40])})


async def test_a_long_statement_is_converted_once(
    store: PostgresTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[bytes] = []
    convert = _query2pg_nocache

    def counted(query: bytes, encoding: str) -> Any:
        converted.append(query)
        return convert(query, encoding)

    monkeypatch.setattr(cursors, "_query2pg_nocache", counted)
    cursors._converted.cache_clear()
    padding = ", ".join(f"%(a)s::int + {index}" for index in range(600))  # some 9,000 bytes
    text = f"SELECT %(a)s::int + %(b)s::int, greatest({padding}) AS far"
    assert len(text) > 4096
    assert cursors.CONVERTING, "psycopg's private names changed: see cursors.py"
    async with store._db.pool.connection() as connection:
        assert connection.cursor_factory is cursors.Cursor
        for a in range(3):
            cursor = await connection.execute(text, {"a": a, "b": 10})
            assert await cursor.fetchone() == (a + 10, a + 599)
        cursor = await connection.execute("SELECT %s::int", (5,))  # positional: as psycopg's
        assert await cursor.fetchone() == (5,)
    assert len([query for query in converted if len(query) > 4096]) == 1
    converted.clear()
    many = ", ".join(f"%(a{index})s::int" for index in range(cursors.MOST_PARAMETERS + 1))
    values = {f"a{index}": index for index in range(cursors.MOST_PARAMETERS + 1)}
    async with store._db.pool.connection() as connection:
        cursor = await connection.execute(f"SELECT greatest({many})", values)
        assert await cursor.fetchone() == (cursors.MOST_PARAMETERS,)
    assert converted == []  # beyond the bound: psycopg's own conversion, not kept here


async def test_a_text_is_converted_for_each_connection_encoding() -> None:
    """The conversions are kept by encoding: a text converted for a UTF-8 connection is
    not sent to a LATIN1 one."""
    text = "SELECT 'é' || %(a)s::text, length('é')"
    cursors._converted.cache_clear()
    url = postgres.require_server()
    for encoding in ("UTF8", "LATIN1", "UTF8"):
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, cursor_factory=cursors.Cursor
        ) as connection:
            await connection.execute(f"SET client_encoding TO '{encoding}'")
            cursor = await connection.execute(text, {"a": "x"})
            assert await cursor.fetchone() == ("éx", 1), encoding
    assert cursors._converted.cache_info().currsize == 2


def test_every_binary_array_of_the_batches_is_a_typed_list() -> None:
    """Each ``%(name)b`` parameter of the batched statements is bound as a typed list (a
    plain list would still bind, read for its element type at every execution)."""
    now = datetime(2026, 11, 27, tzinfo=UTC)
    built = {
        "node starts": nodes.starts([]),
        "node ends": nodes.ends([]),
        "tasks held": finishes.held([]),
        "final node ends": finishes.node_ends([]),
        "run ends": finishes.run_ends([], []),
        "reads": updates.read([]),
        "writes": updates.writes([], []),
        "takes": takes._statement([], now, None),
    }
    for name, statement in built.items():
        assert isinstance(statement.parameters, dict)
        arrays = re.findall(r"%\((\w+)\)b", statement.text)
        assert arrays, name
        for array in arrays:
            assert isinstance(statement.parameters[array], TypedArray), (name, array)
