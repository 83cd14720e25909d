"""`taskloom run` shows its own progress: no lifecycle log records beside it."""

import logging
from pathlib import Path

import pytest

from taskloom.cli import main
from taskloom.observability.logs import EVENTS_LOGGER


def test_a_failing_run_logs_no_lifecycle_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=EVENTS_LOGGER)
    arguments = '{"start": 4, "tick_s": 0, "fail_at": 2}'
    with pytest.raises(SystemExit) as raised:
        main(["run", "countdown", "--input", arguments, "--db", str(tmp_path / "x.db")])
    assert raised.value.code == 1
    assert "told to fail at 2" in capsys.readouterr().out
    assert [record for record in caplog.records if record.name == EVENTS_LOGGER] == []
