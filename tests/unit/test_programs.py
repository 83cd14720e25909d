"""The allow-list rule of command_matrix: names, absolute paths, links, and `*`."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from taskloom.workflows.programs import ProgramNotAllowedError, check_entries, resolve_program

PYTHON = os.path.realpath(sys.executable)


def test_a_listed_name_runs_what_the_workers_path_finds() -> None:
    assert resolve_program("sh", ["sh"]) == shutil.which("sh")


def test_a_listed_name_never_allows_a_path_of_that_name(tmp_path: Path) -> None:
    with pytest.raises(ProgramNotAllowedError, match="a path must resolve"):
        resolve_program("./sh", ["sh"], cwd=str(tmp_path))
    with pytest.raises(ProgramNotAllowedError, match="a path must resolve"):
        resolve_program(str(tmp_path / "sh"), ["sh"])


def test_a_listed_path_allows_that_file_by_any_name_that_leads_to_it(tmp_path: Path) -> None:
    (tmp_path / "py").symlink_to(PYTHON)
    assert resolve_program(sys.executable, [PYTHON]) == sys.executable
    assert resolve_program("./py", [PYTHON], cwd=str(tmp_path)) == str(tmp_path / "py")
    shell = shutil.which("sh")
    assert shell is not None
    assert resolve_program("sh", [os.path.realpath(shell)]) == shell


def test_unlisted_programs_are_refused() -> None:
    with pytest.raises(ProgramNotAllowedError, match="program 'rm' is not in allowed_programs"):
        resolve_program("rm", ["make", PYTHON])
    with pytest.raises(ProgramNotAllowedError):
        resolve_program("rm", [])


def test_a_star_allows_any_program() -> None:
    assert resolve_program("sh", ["*"]) == shutil.which("sh")
    assert resolve_program("not-installed-xyz", ["*"]) == "not-installed-xyz"


@pytest.mark.parametrize(
    ("entry", "message"), [("bin/make", "must be absolute"), ("", "cannot be empty")]
)
def test_entries_are_names_or_absolute_paths(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_entries([entry])


def test_a_relative_path_is_made_absolute_so_the_checked_file_is_the_one_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "py").symlink_to(PYTHON)
    monkeypatch.chdir(tmp_path)
    assert resolve_program("./py", [PYTHON], cwd="sub") == str(tmp_path / "sub" / "py")
