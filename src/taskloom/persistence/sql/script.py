"""Scripts: a store rule as a generator of statements, run by either SQL store.

A script yields a :class:`Statement` (or a tuple of them, one round trip where the
dialect fuses writes) and is sent back the :class:`Result` of the last one. The SQLite
store runs scripts with :func:`run_sync` in its connection's thread, the PostgreSQL
store with :func:`run_async`; the rule is written once for both.
"""

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

_T = TypeVar("_T")

Parameters = Mapping[str, Any] | Sequence[Any]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement and its parameters."""

    text: str
    parameters: Parameters = ()
    prepare: bool = False
    """PostgreSQL: prepare it on a connection at its first execution there, where psycopg
    prepares a statement at its sixth: for a statement whose plan costs more than its
    execution (the claim's, ADR 0067). SQLite caches every statement's plan anyway."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a statement returned: its rows (if any) and the rows it changed."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rowcount: int = -1

    def one(self) -> tuple[Any, ...] | None:
        """The first row, or ``None``."""
        return self.rows[0] if self.rows else None


Query = Statement | tuple[Statement, ...]
Script = Generator[Query, Result, _T]


def fused(statements: tuple[Statement, ...]) -> Statement:
    """*statements* as one: every one but the last in a writable ``WITH`` clause, all on
    one snapshot. They must bind named parameters, equal where the names are.

    Raises:
        TypeError: a statement binds positional parameters.
        ValueError: two bind one name to different values (fusing would silently bind
            one of them).
    """
    *first, last = statements
    parameters: dict[str, Any] = {}
    for statement in statements:
        if not isinstance(statement.parameters, Mapping):
            raise TypeError("only statements with named parameters can be fused")
        for name, value in statement.parameters.items():
            if parameters.setdefault(name, value) != value:
                raise ValueError(f"fused statements bind {name!r} to different values")
    clauses = ", ".join(f"s{index} AS ({each.text})" for index, each in enumerate(first))
    return Statement(f"WITH {clauses} {last.text}" if first else last.text, parameters)


class SyncCursor(Protocol):
    """The part of a DB-API cursor a sync run uses."""

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> list[Any]: ...


class AsyncCursor(Protocol):
    """The part of psycopg's async cursor an async run uses."""

    @property
    def rowcount(self) -> int: ...

    @property
    def rownumber(self) -> int | None: ...

    async def fetchall(self) -> list[Any]: ...


class Execute(Protocol):
    """The part of psycopg's async ``execute`` an async run uses."""

    def __call__(
        self, query: str, params: Parameters, /, *, prepare: bool | None = None
    ) -> Awaitable[AsyncCursor]: ...


@dataclass(frozen=True)
class _Done(Generic[_T]):
    value: _T


def _advance(script: Script[_T], result: Result | None) -> Query | _Done[_T]:
    """The script's next query after *result* (``None``: its first), or its value."""
    try:
        return script.send(result) if result is not None else next(script)
    except StopIteration as stop:
        return _Done(stop.value)


def run_sync(script: Script[_T], execute: Callable[[str, Parameters], SyncCursor]) -> _T:
    """Run *script*, each statement through *execute* (a tuple one after another)."""
    send = script.send  # the hot loop of every SQLite transaction: no step objects
    try:
        step = next(script)
    except StopIteration as stop:
        value: _T = stop.value
        return value
    while True:
        if isinstance(step, tuple):
            result = Result()
            for statement in step:
                cursor = execute(statement.text, statement.parameters)
                found = cursor.fetchall()  # before rowcount: a RETURNING statement ends here
                result = Result(found, cursor.rowcount)
        else:
            cursor = execute(step.text, step.parameters)
            result = Result(cursor.fetchall(), cursor.rowcount)
        try:
            step = send(result)
        except StopIteration as stop:
            value = stop.value
            return value


async def run_async(script: Script[_T], execute: Execute) -> _T:
    """Run *script*, each statement through *execute* (a tuple fused into one)."""
    step = _advance(script, None)
    while not isinstance(step, _Done):
        statement = fused(step) if isinstance(step, tuple) else step
        if statement.prepare:
            cursor = await execute(statement.text, statement.parameters, prepare=True)
        else:
            cursor = await execute(statement.text, statement.parameters)
        # ``rownumber`` is None without rows to fetch; ``description`` would build a
        # column object per column of every result
        found = await cursor.fetchall() if cursor.rownumber is not None else []
        step = _advance(script, Result(found, cursor.rowcount))
    return step.value


def ask(query: Query) -> Script[Result]:
    """The result of *query*, inside a script (``found = yield from ask(...)``)."""
    result = yield query
    return result
