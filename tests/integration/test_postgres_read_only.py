"""Read commands on PostgreSQL open the database read-only: they never create or
migrate the schema; an old or missing one is refused in one line, as on SQLite."""

import secrets
from collections.abc import Iterator

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.cli import main
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.postgres.schema import VERSION_TABLE, latest_version
from tests import postgres

READ_COMMANDS = [
    ["tasks", "list"],
    ["tasks", "show", "t-1"],
    ["tasks", "result", "t-1"],
    ["tasks", "watch", "t-1"],
    ["tokens", "list"],
]


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a new, empty database on the test server (the CLI's schema is fixed)."""
    server = postgres.require_server()
    name = f"test_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield _as_url(server, name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def _as_url(server: str, name: str) -> str:
    """*server*'s URL naming database *name* (the test URL ends with ``/dbname``)."""
    base, _, _ = server.partition("?")[0].rpartition("/")
    return f"{base}/{name}"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    captured = capsys.readouterr()
    code = raised.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


def _versions(url: str) -> list[int] | None:
    with psycopg.connect(url) as connection:
        found = connection.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'taskloom'"
        ).fetchone()
        if found is None or found[0] == 0:
            return None
        rows = connection.execute(f"SELECT version FROM taskloom.{VERSION_TABLE} ORDER BY 1")
        return [version for (version,) in rows.fetchall()]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda argv: "-".join(argv[:2]))
def test_a_read_command_refuses_an_older_schema_in_one_line_and_leaves_it(
    database: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    async def migrate() -> None:
        async with PostgresTaskStore.open(PostgresSettings(url=database)):
            pass

    anyio.run(migrate, backend="asyncio")
    with psycopg.connect(database) as connection:  # as a taskloom one release older left it
        connection.execute(
            f"DELETE FROM taskloom.{VERSION_TABLE} WHERE version = %s", (latest_version(),)
        )
    older = list(range(1, latest_version()))

    code, out, err = _cli(capsys, *command, "--db", database)

    assert (code, out) == (2, "")
    assert err.count("\n") == 1, err
    assert f"has schema version {latest_version() - 1}, older than this taskloom's" in err
    assert "upgrade it with: taskloom db migrate --db postgresql://" in err
    assert _versions(database) == older


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda argv: "-".join(argv[:2]))
def test_a_read_command_never_creates_the_schema(
    database: str, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, *command, "--db", database)

    assert (code, out) == (2, "")
    assert err.count("\n") == 1, err
    assert "holds no taskloom tables; create them with: taskloom db migrate" in err
    assert _versions(database) is None
