"""The command line: user mistakes are one line on stderr and exit code 2."""

from pathlib import Path

import pytest

from taskloom.cli import main


def _mistake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    return err


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert _mistake(capsys) == (
        "taskloom: error: choose a command: serve, run, tasks, workflows, db, worker, tokens, ui\n"
    )


def test_an_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert _mistake(capsys, "serve", "--bogus") == (
        "taskloom: error: No such option '--bogus'. (see: taskloom serve --help)\n"
    )


def test_a_workflow_module_that_does_not_import(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _mistake(capsys, "serve", "--db", str(tmp_path / "x.db"), "--workflows", "no_such_mod")
    assert err == "taskloom: error: cannot import workflow module 'no_such_mod': " + (
        "No module named 'no_such_mod'\n"
    )


def test_the_environment_sets_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("hello, this is not SQLite" * 10)
    monkeypatch.setenv("TASKLOOM_DB", str(not_a_database))
    assert "is not a readable taskloom database" in _mistake(capsys, "serve")
    monkeypatch.setenv("TASKLOOM_WORKFLOWS", "also_missing, other")
    assert "'also_missing'" in _mistake(capsys, "serve")
