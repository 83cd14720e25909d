"""Lifecycle events as JSON and text log lines, with their fields and without secrets."""

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from taskloom.engine.models import TaskId
from taskloom.engine.observe import RunInfo
from taskloom.engine.states import TaskState
from taskloom.observability.logs import (
    JsonFormatter,
    LogObserver,
    TextFormatter,
    configure_logging,
)
from tests.observability.test_observer import engine, run_shaky

SECRET = "hunter2-not-for-logs"


@pytest.fixture
def events() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing JSON lines at DEBUG to a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.observability.events")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, buffer
    logger.removeHandler(handler)


def _by_message(lines: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["message"] == message]


async def test_json_lines_carry_the_lifecycle_fields(
    events: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = events
    async with engine(LogObserver(logger)) as manager:
        done = await run_shaky(manager, {"password": SECRET})
    assert done.state is TaskState.FAILED
    text = buffer.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    assert _by_message(lines, "task created")[0]["task_id"] == done.id
    [retry] = _by_message(lines, "node attempt failed; retrying")
    assert retry["level"] == "warning"
    assert (retry["workflow"], retry["node"], retry["attempt"]) == ("shaky", "flaky", 1)
    assert (retry["outcome"], retry["retrying"], retry["error_type"]) == (
        "failed",
        True,
        "ConnectionError",
    )
    assert retry["duration_s"] >= 0
    assert len(_by_message(lines, "node attempt started")) == 3
    [failed] = _by_message(lines, "node attempt failed")
    assert (failed["node"], failed["retrying"], failed["error_type"]) == (
        "broken",
        False,
        "ValueError",
    )
    [finished] = _by_message(lines, "task finished")
    assert (finished["outcome"], finished["error_code"]) == ("failed", "node_failed")
    [ended] = _by_message(lines, "run ended")
    assert ended["outcome"] == "failed"
    assert SECRET not in text  # arguments are never logged
    assert "secret-ish" not in text  # nor error messages (they may quote arguments)


def test_text_lines_put_the_fields_after_the_message() -> None:
    record = logging.LogRecord("taskloom.events", logging.INFO, __file__, 1, "run ended", (), None)
    record.fields = {"task_id": "t1", "outcome": "completed"}
    line = TextFormatter().format(record)
    assert line.endswith("INFO taskloom.events: run ended task_id=t1 outcome=completed")


def test_configure_logging_sends_json_lines_from_every_logger() -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buffer = io.StringIO()
    try:
        configure_logging("json", "info", stream=buffer)
        logging.getLogger("some.library").info("hello %s", "there")
        logging.getLogger("some.library").debug("not at info")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    [line] = [json.loads(text) for text in buffer.getvalue().splitlines()]
    assert (line["level"], line["logger"], line["message"]) == (
        "info",
        "some.library",
        "hello there",
    )


def test_a_lost_lease_is_an_info_line(events: tuple[logging.Logger, io.StringIO]) -> None:
    """The worker says in one WARNING which runs a heartbeat found lost (ADR 0038)."""
    logger, buffer = events
    run = RunInfo(task_id=TaskId("t1"), workflow="w", resumed=True)
    LogObserver(logger).run_started(run)
    LogObserver(logger).run_ended(run, "lease_lost", 1.5)
    started, ended = (json.loads(line) for line in buffer.getvalue().splitlines())
    assert (started["message"], started["level"]) == ("run resumed", "info")
    assert (ended["level"], ended["outcome"], ended["duration_s"]) == ("info", "lease_lost", 1.5)


async def test_at_warning_level_only_the_failed_attempts_are_logged(
    events: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = events
    logger.setLevel(logging.WARNING)
    async with engine(LogObserver(logger)) as manager:
        await run_shaky(manager, {"password": SECRET})
    run = RunInfo(task_id=TaskId("t1"), workflow="w", resumed=False)
    LogObserver(logger).run_ended(run, "completed", 1.0)  # INFO: dropped
    LogObserver(logger).run_ended(run, "lease_lost", 1.0)  # INFO: dropped (the worker warns)
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("warning", "node attempt failed; retrying"),
        ("warning", "node attempt failed"),
    ]
    assert lines[0]["error_type"] == "ConnectionError"
