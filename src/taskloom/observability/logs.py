"""Log lines: text (the default) or JSON, and the engine's lifecycle events as log records.

Lifecycle records carry structured fields (``task_id``, ``workflow``, ``node``,
``attempt``, ``outcome``, ``duration_s``...) in the record's ``fields`` attribute: the JSON
format writes them as keys of the line, the text format as ``key=value`` after the
message. Arguments, results, answers and error messages are never logged (they may hold
secrets); an error is logged by its type and fingerprint.
"""

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

from taskloom.engine.models import Task
from taskloom.engine.observe import AttemptEnd, AttemptInfo, RunInfo
from taskloom.engine.runs import FAILURE_OUTCOMES, AttemptOutcome
from taskloom.engine.states import TaskState

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
EVENTS_LOGGER: Final = "taskloom.events"

_RESERVED: Final = frozenset({"time", "level", "logger", "message", "exception"})


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time``, ``level``, ``logger``, ``message``, then the
    record's fields (and ``exception`` with the traceback, if any), ASCII only."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in _RESERVED})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)  # ASCII: no U+2028 or bidi control survives


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``; a value that is not one plain word
    is written as a JSON string, so no value can break the line or fake a field."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # logging's name
        text = super().formatMessage(record)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields:
            text += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        return text


_PLAIN_WORD: Final = re.compile(r"[A-Za-z0-9_.:/@+-]+")


def _text_value(value: object) -> str:
    """*value* as the text format writes it: numbers and plain words as they are, any
    other value as JSON (ASCII only, so no line break or bidi control survives)."""
    if isinstance(value, bool | int | float) or value is None:
        return str(value)
    if isinstance(value, str) and _PLAIN_WORD.fullmatch(value):
        return value
    return json.dumps(value if isinstance(value, str) else str(value))


def configure_logging(
    log_format: LogFormat = "text", level: str = "warning", stream: TextIO | None = None
) -> None:
    """Send every log record at *level* or above to *stream* (stderr) in *log_format*."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


class LogObserver:
    """Logs the engine's lifecycle events on ``taskloom.events``: tasks, runs and retries
    at INFO, failed attempts at WARNING, attempt starts at DEBUG."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger(EVENTS_LOGGER)

    def task_created(self, task: Task) -> None:
        """Log it."""
        if self._logger.isEnabledFor(logging.INFO):
            self._log(logging.INFO, "task created", task_id=task.id, workflow=task.name)

    def task_finished(self, task: Task) -> None:
        """Log it, with its duration since creation."""
        if not self._logger.isEnabledFor(logging.INFO):
            return
        fields: dict[str, Any] = {
            "task_id": task.id,
            "workflow": task.name,
            "outcome": task.state.value,
            "duration_s": round((task.updated_at - task.created_at).total_seconds(), 6),
        }
        if task.state is TaskState.FAILED and task.error is not None:
            fields["error_code"] = task.error.code
            if task.error.error_type is not None:
                fields["error_type"] = task.error.error_type
        self._log(logging.INFO, "task finished", **fields)

    def run_started(self, run: RunInfo) -> None:
        """Log it; a resumed run (its previous worker stopped or its lease was reclaimed)
        says so."""
        if not self._logger.isEnabledFor(logging.INFO):
            return
        message = "run resumed" if run.resumed else "run started"
        self._log(logging.INFO, message, task_id=run.task_id, workflow=run.workflow)

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """Log it (INFO; a lost lease too: the worker says so in one WARNING for all the
        runs one heartbeat found lost, ADR 0038)."""
        level = logging.INFO
        if not self._logger.isEnabledFor(level):
            return
        self._log(
            level,
            "run ended",
            task_id=run.task_id,
            workflow=run.workflow,
            outcome=outcome,
            duration_s=round(duration_s, 6),
        )

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Log it (DEBUG)."""
        if self._logger.isEnabledFor(logging.DEBUG):
            self._log(logging.DEBUG, "node attempt started", **_attempt_fields(attempt))

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """Log it: WARNING when it failed or timed out, saying whether a retry follows."""
        message, level = _attempt_end(end.outcome, retrying=end.retrying)
        if not self._logger.isEnabledFor(level):
            return
        fields = {
            **_attempt_fields(attempt),
            "outcome": end.outcome.value,
            "retrying": end.retrying,
            "duration_s": round(end.duration_s, 6),
        }
        if end.error is not None:
            fields["error_type"] = end.error.error_type
            fields["fingerprint"] = end.error.fingerprint
        self._log(level, message, **fields)

    def _log(self, level: int, message: str, **fields: Any) -> None:
        self._logger.log(level, message, extra={"fields": fields})


def _attempt_fields(attempt: AttemptInfo) -> dict[str, Any]:
    return {
        "task_id": attempt.task_id,
        "workflow": attempt.workflow,
        "node": attempt.node,
        "phase": attempt.phase,
        "attempt": attempt.attempt,
    }


def _attempt_end(outcome: AttemptOutcome, *, retrying: bool) -> tuple[str, int]:
    """The message and level of an attempt's end: WARNING when it failed or timed out."""
    if outcome not in FAILURE_OUTCOMES:
        return "node attempt ended", logging.INFO
    if retrying:
        return "node attempt failed; retrying", logging.WARNING
    return "node attempt failed", logging.WARNING
