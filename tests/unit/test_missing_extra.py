"""Without the ``postgres`` extra, a PostgreSQL database is one clear error naming it."""

import sys

import pytest

from taskloom import MissingExtraError
from taskloom.cli import main
from taskloom.persistence.factory import describe_database, open_store
from taskloom.persistence.postgres.extra import MISSING

URL = "postgresql://someone@localhost:1/nothing"


@pytest.fixture
def without_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Imports of psycopg fail as they do where the extra is not installed."""
    monkeypatch.setitem(sys.modules, "psycopg", None)


@pytest.mark.usefixtures("without_driver")
async def test_opening_a_postgresql_store_names_the_extra() -> None:
    with pytest.raises(MissingExtraError) as raised:
        async with open_store(URL):
            pass
    assert str(raised.value) == MISSING
    assert raised.value.extra == "postgres"
    assert "pip install 'taskloom[postgres]'" in MISSING
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)


@pytest.mark.usefixtures("without_driver")
def test_the_store_class_and_descriptions_name_the_extra() -> None:
    with pytest.raises(MissingExtraError):
        from taskloom.persistence.postgres import PostgresTaskStore  # noqa: F401
    with pytest.raises(MissingExtraError):
        describe_database(URL)
    assert describe_database("tasks.db") == "tasks.db"


@pytest.mark.usefixtures("without_driver")
@pytest.mark.parametrize(
    "argv",
    [["tasks", "list", "--db", URL], ["serve", "--db", URL], ["db", "migrate", "--db", URL]],
    ids=lambda argv: argv[0],
)
def test_the_command_line_says_which_extra_to_install(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    assert capsys.readouterr().err == f"taskloom: error: {MISSING}\n"
