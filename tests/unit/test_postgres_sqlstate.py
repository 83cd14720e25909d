"""``is_transient`` on every SQLSTATE psycopg knows, against the table of ADR 0017."""

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import errors

from taskloom.engine.errors import DatabaseBusyError, DatabaseUnavailableError, PersistenceError
from taskloom.persistence.postgres.driver import translate
from taskloom.persistence.postgres.sqlstate import is_transient

TRANSIENT_CLASSES = {"08", "40", "53"}
"""ADR 0017: connection exception, transaction rollback, insufficient resources."""
TRANSIENT_CODES = {"55P03", "57P01", "57P02", "57P03", "57P05"}
PERMANENT_CODES = {"08004", "08007", "08P01", "40002", "40003", "53100", "53400"}
POSTGRES_CLASSES = {
    *("00", "01", "02", "03", "08", "09", "0A", "0B", "0F", "0L", "0P", "0Z", "10"),
    *("20", "21", "22", "23", "24", "25", "26", "27", "28", "2B", "2D", "2F", "34"),
    *("38", "39", "3B", "3D", "3F", "40", "42", "44", "53", "54", "55", "57", "58"),
    *("72", "F0", "HV", "P0", "XX"),
}
"""Every class in the PostgreSQL manual's "PostgreSQL Error Codes" appendix."""


def _known_codes() -> Iterator[str]:
    """Every SQLSTATE psycopg has an exception class for."""
    pending: list[type[BaseException]] = [psycopg.Error]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        code = getattr(cls, "sqlstate", None)
        if isinstance(code, str) and len(code) == 5:
            yield code


CODES = sorted(set(_known_codes()))


def _error(code: str) -> psycopg.Error:
    return errors.lookup(code)(f"error {code}")


def _expected(code: str) -> bool:
    if code in PERMANENT_CODES:
        return False
    return code[:2] in TRANSIENT_CLASSES or code in TRANSIENT_CODES


def test_every_class_of_the_manual_is_covered() -> None:
    assert {code[:2] for code in CODES} >= POSTGRES_CLASSES - {"00", "01", "02"}
    assert len(CODES) > 200


@pytest.mark.parametrize("code", CODES)
def test_is_transient_follows_the_table(code: str) -> None:
    assert is_transient(_error(code)) is _expected(code), code


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        ("40001", True),  # serialization failure: not a TransactionRollback in psycopg 3.3
        ("40P01", True),  # deadlock detected: likewise
        ("40000", True),
        ("08006", True),
        ("53300", True),  # too many connections
        ("55P03", True),
        ("57P01", True),
        ("57P03", True),
        ("57014", False),  # query cancelled on purpose (or a statement timeout)
        ("57P04", False),  # database dropped
        ("58030", False),  # I/O error: an operator must act
        ("XX000", False),
        ("23505", False),
        ("42P01", False),
        ("25006", False),  # read-only transaction
    ],
)
def test_the_codes_that_matter_most(code: str, transient: bool) -> None:
    assert is_transient(_error(code)) is transient


def test_errors_without_a_sqlstate() -> None:
    assert is_transient(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not is_transient(psycopg.InterfaceError("the connection is closed"))
    assert not is_transient(psycopg.ProgrammingError("bad query"))
    assert not is_transient(OSError("not a driver error"))


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("40001", DatabaseBusyError),
        ("40P01", DatabaseBusyError),
        ("55P03", DatabaseBusyError),
        ("57P01", DatabaseUnavailableError),
        ("08006", DatabaseUnavailableError),
        ("53300", DatabaseUnavailableError),
        ("23505", PersistenceError),
    ],
)
def test_translate_by_sqlstate(code: str, kind: type[PersistenceError]) -> None:
    translated = translate(_error(code), "u@h:5432/db")
    assert type(translated) is kind
    assert "u@h:5432/db" in str(translated)
