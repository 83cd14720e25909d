"""The processes the tests start run this checkout's code (``tests.helpers.checkout_env``),
not the package the interpreter has installed: from a git worktree, the shared venv's
editable install is the main checkout's, and a branch's subprocess tests ran main's code
(a branch adding a migration failed them there, and passed on main)."""

import os
import re
import sys
from pathlib import Path

from tests.helpers import CHECKOUT, checkout_env, helper_process

REPORT = (
    "import taskloom, tests.helpers; "
    "print('ready', taskloom.__file__, tests.helpers.__file__, flush=True)"
)
LEFT_ALONE = {
    "tests/helpers.py": "where it is set",
    "tests/e2e/test_readme_fresh_clone.py": "runs a fresh clone's own src",
    "tests/e2e/test_core_install.py": "runs an install in a venv of its own, without it",
    "tests/docs/commands.py": "no PYTHONPATH from outside (ADR 0035); its own taskloom command",
}
"""Test modules that set ``PYTHONPATH`` without ``checkout_env``, and why."""
SETS_PATH = re.compile(r"[\"']PYTHONPATH[\"']|PYTHONPATH=\{")
"""A line that sets (or reads) it: an environment's key, or a shell's assignment."""


async def test_a_process_of_the_tests_imports_this_checkout_s_code(tmp_path: Path) -> None:
    """Without a ``PYTHONPATH`` of the caller's (a plain ``pytest`` run), from another
    folder: ``taskloom`` and ``tests`` come from this checkout."""
    bare = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [sys.executable, "-c", REPORT]
    async with helper_process(command, cwd=tmp_path, env=bare) as child:
        await child.process.wait()
    package, helpers = child.ready.split()
    assert Path(package) == CHECKOUT / "src" / "taskloom" / "__init__.py"
    assert Path(helpers) == CHECKOUT / "tests" / "helpers.py"
    assert checkout_env(bare)["PYTHONPATH"].split(os.pathsep) == [
        str(CHECKOUT / "src"),
        str(CHECKOUT),
    ]
    assert checkout_env({"PYTHONPATH": "x"}, TASKLOOM_DB="y") == {
        "PYTHONPATH": os.pathsep.join([str(CHECKOUT / "src"), str(CHECKOUT), "x"]),
        "TASKLOOM_DB": "y",
    }


def test_every_test_process_gets_its_path_from_checkout_env() -> None:
    """A line of a test module that sets ``PYTHONPATH`` goes through ``checkout_env``:
    a path of its own (the repository's root, say) ran the installed package. Checked
    against the modules before it: 47 such lines in 29 modules."""
    found = []
    for module in sorted((CHECKOUT / "tests").rglob("*.py")):
        name = module.relative_to(CHECKOUT).as_posix()
        if name in LEFT_ALONE or name == "tests/unit/test_checkout_env.py":
            continue
        for number, line in enumerate(module.read_text().splitlines(), 1):
            if SETS_PATH.search(line) and "checkout_env" not in line:
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == []
