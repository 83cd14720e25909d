"""One WARNING when a database goes, one INFO when it is back (ADR 0038)."""

import logging
import sqlite3
import time
from pathlib import Path

import pytest

from taskloom.engine.errors import DatabaseBusyError
from taskloom.persistence.outage import Outage
from taskloom.persistence.sqlite.driver import retry_transient


def test_an_outage_is_one_warning_and_one_info_with_wake_ups(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="taskloom.store")
    woken: list[str] = []
    outage = Outage("PostgreSQL app@db:5432/tasks")
    outage.on_back(lambda: woken.append("worker"))
    outage.answered()  # no outage: nothing to say
    for _ in range(5):
        outage.stumbled()
        outage.failed(ConnectionRefusedError("refused"))
    assert outage.down
    outage.answered()
    outage.answered()
    lines = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert lines[0][1].startswith(
        "PostgreSQL app@db:5432/tasks is unavailable (ConnectionRefusedError)"
    )
    assert "is back after an outage of" in lines[1][1]
    assert woken == ["worker"]


def test_a_give_up_of_an_operation_that_began_before_the_return_is_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operation that waited through the outage and timed out just as the database
    came back says nothing about now: no second outage is announced."""
    caplog.set_level(logging.DEBUG, logger="taskloom.store")
    outage = Outage("SQLite database tasks.db")
    began = time.monotonic()
    outage.failed(TimeoutError("no connection"), started=began)
    outage.answered()
    outage.failed(TimeoutError("no connection"), started=began)  # stale
    stale_made_it_down = outage.down
    outage.failed(TimeoutError("no connection"), started=time.monotonic())  # a new outage
    assert (stale_made_it_down, outage.down) == (False, True)
    levels = [record.levelno for record in caplog.records]
    assert levels == [logging.WARNING, logging.INFO, logging.WARNING]


async def test_a_read_that_does_not_tell_leaves_the_outage_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read on a writable SQLite store (``tells=False``) neither opens an outage nor
    dates a later one: only a write could ever say that the database is back."""
    caplog.set_level(logging.DEBUG, logger="taskloom.store")
    outage = Outage("SQLite database tasks.db", retry_after_s=3)

    async def locked() -> None:
        error = sqlite3.OperationalError("database is locked")
        error.sqlite_errorcode = sqlite3.SQLITE_BUSY
        raise error

    with pytest.raises(DatabaseBusyError) as caught:
        await retry_transient(
            locked, path=Path("tasks.db"), within_s=0.3, outage=outage, tells=False
        )
    assert caught.value.retry_after_s == 3
    assert not outage.down
    outage.failed(TimeoutError("a write gave up"))
    outage.answered()
    assert caplog.records[-1].getMessage().endswith("is back after an outage of 0.0 s")
    assert [record.levelno for record in caplog.records] == [logging.WARNING, logging.INFO]
