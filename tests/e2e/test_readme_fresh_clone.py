"""Issue 26, item 4: the README's "Try it" commands work as written, in order, in a fresh
clone of the repository, for someone whose PATH has no ``taskloom`` yet.

The clone is made from this checkout's committed state (``git clone``) into a temporary
folder, with a fresh ``HOME`` and a PATH of system folders only. ``make demo`` is the one
command not run as written: it would build a second virtualenv (a minute and more of pip)
and run the demo (about 30 s; ``tests/e2e/test_demo.py`` runs it). Its effect is made
instead: the clone's ``.venv`` is this test's virtualenv, with the clone's ``src`` first
on ``PYTHONPATH`` so that the clone's code is what runs. Every other line runs as
written, in one ``bash`` each, after the lines that ``source`` something.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.commands import commands
from tests.docs.snippets import Snippet, snippets

pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _try_it(readme: Path) -> Snippet:
    """The console block of the README's "Try it" section."""
    text = readme.read_text(encoding="utf-8")
    section = text.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    (block,) = [block for block in snippets(readme, "console") if block.code in section]
    return block


def test_the_try_it_commands_work_in_order_in_a_fresh_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    clone = tmp_path / "taskloom"
    subprocess.run(
        ["git", "clone", "--quiet", str(REPOSITORY), str(clone)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PATH": SYSTEM_PATH,
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(clone / "src"),
    }
    lines = [command.text for command in commands(_try_it(clone / "README.md"), console=True)]
    assert lines[0].startswith("make demo")
    assert lines[1].startswith(". .venv/bin/activate")
    found = subprocess.run(
        ["bash", "-c", "command -v taskloom"], env=env, cwd=clone, check=False, timeout=30
    )
    assert found.returncode != 0  # not on the PATH before the README says how
    (clone / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)  # `make demo`
    sourced: list[str] = []
    outputs: dict[str, str] = {}
    for line in lines[1:]:
        if line.startswith((". ", "source ")):
            sourced.append(line)
        before = sourced if not line.startswith((". ", "source ")) else []
        script = "\n".join(["set -e", *before, line])  # lines: a comment ends with its line
        ran = subprocess.run(
            ["bash", "-c", script],
            env=env,
            cwd=clone,
            stdin=subprocess.DEVNULL,  # `taskloom serve` reads requests until EOF
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, f"{line}\n{ran.stdout}\n{ran.stderr}"
        assert "Traceback" not in ran.stderr, f"{line}\n{ran.stderr}"
        outputs[line.split("#", 1)[0].strip()] = ran.stdout
    listed = outputs["taskloom tasks list"].splitlines()
    assert listed[0].split() == ["ID", "WORKFLOW", "STATE", "CREATED", "TOOK", "STATUS"]
    assert sorted(row.split()[1:3] for row in listed[1:]) == [
        ["countdown", "completed"],
        ["repo_audit", "completed"],
    ]
    assert (clone / "taskloom.db").is_file()  # where the README says the tasks go
