"""The shell commands of README.md and docs/ run as written (rules: tests/docs/commands.py,
ADR 0035), and the runner keeps its rules."""

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests import postgres
from tests.docs.commands import CommandFailed, Page, command_blocks, commands, run_page
from tests.docs.snippets import DOCS, pages
from tests.helpers import CHECKOUT

README = DOCS.parent / "README.md"
PAGES = [page for page in [README, *pages()] if command_blocks(page)]

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(DOCS.parent)))
async def test_every_command_runs(page: Path, tmp_path: Path) -> None:
    failure = ""
    try:
        ran = await run_page(page, tmp_path)
    except CommandFailed as error:
        failure = str(error)
    if failure:
        pytest.fail(failure, pytrace=False)
    blocks = command_blocks(page)
    assert ran or all(block.skipped for block in blocks)


def test_commands_are_found_and_exceptions_are_rare_and_say_why() -> None:
    every = [block for page in PAGES for block in command_blocks(page)]
    skipped = [block for block in every if block.skipped]
    assert len(every) >= 10
    assert len(skipped) <= 5, [block.where for block in skipped]
    assert all(block.marker and len(block.marker) > len("not-run: ") + 10 for block in skipped)


PAGE = """# A page

```console
$ export GREETING='hello there'
$ echo "$GREETING" && echo second \\
    line
hello there
second line
```

<!-- not-run: shows a failure on purpose -->
```sh
false
```

```sh
# a comment
test -d src && test -f myproject/flows.py && test "$HOME" = "$PWD/home"
```
"""


def test_console_lines_exports_continuations_and_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = command_blocks(page)
    assert [block.marker for block in blocks] == [None, "not-run: shows a failure on purpose", None]
    console = commands(blocks[0], console=True)
    assert [command.text for command in console] == [
        "export GREETING='hello there'",
        'echo "$GREETING" && echo second  line',
    ]
    assert console[1].expected == ("hello there", "second line")
    assert [command.line for command in console] == [4, 5]


async def test_a_page_runs_in_a_project_of_its_own(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert await run_page(page, tmp_path / "run") == 3  # the export counts; `false` is skipped


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("$ echo hi\nbye\n", r"page.md:2: `echo hi` does not print 'bye'"),
        ("$ exit 3\n", r"page.md:2: `exit 3` exited with 3"),
        ("$ pip install 'taskloom[nope]'\n", r"page.md:2: taskloom has no extra 'nope'"),
        ("$ taskloom tasks show Ab12...\n", r"page.md:2: names a task, but the database has none"),
        (
            "$ python -c 'raise SystemExit(0)'; python -c 'import sys; print(\"Traceback\")'\n",
            "shows a traceback",
        ),
    ],
)
async def test_a_failure_names_the_page_line_and_command(
    tmp_path: Path, block: str, message: str
) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"```console\n{block}```\n")
    with pytest.raises(CommandFailed, match=message):
        await run_page(page, tmp_path / "run")


async def test_task_ids_are_bound_to_the_newest_task_and_checked_in_output(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n"
        '$ taskloom run countdown --input \'{"start": 2, "tick_s": 0}\'\n'
        "Running countdown as task Ab12... in taskloom.db\n"
        "$ taskloom tasks result Ab12...\n"
        '  "counted": 2,\n'
        "$ taskloom tasks show Ab12...\n"
        "task       Ab12...\n"
        "```\n"
    )
    assert await run_page(page, tmp_path / "run") == 3


async def test_a_server_is_stopped_once_ready(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```console\n$ taskloom serve --db tasks.db\n```\n")
    assert await run_page(page, tmp_path / "run") == 1


async def test_a_postgresql_url_is_a_database_of_the_page_own_dropped_after(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n"
        "$ export TASKLOOM_DB=postgresql://app@db.internal/app\n"
        '$ taskloom run countdown --input \'{"start": 2, "tick_s": 0}\'\n'
        "$ taskloom tasks show Ab12... --db postgres://app@db.internal/app\n"
        "task       Ab12...\n"
        '$ test ! -e taskloom.db && echo "$TASKLOOM_DB" > url.txt\n'
        "```\n"
    )
    assert await run_page(page, tmp_path / "run") == 4
    url = (tmp_path / "run" / "project" / "url.txt").read_text().strip()
    assert url.startswith(postgres.TEST_URL.rsplit("/", 1)[0] + "/taskloom_")
    with psycopg.connect(postgres.TEST_URL) as connection:
        name = urlsplit(url).path.lstrip("/")
        found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        assert found.fetchone() is None


def test_a_page_runs_this_checkout_s_taskloom(tmp_path: Path) -> None:
    """The ``taskloom`` a page's commands run imports this checkout's code, even where
    the venv's is another checkout's (a git worktree), and a page's ``PYTHONPATH=.``
    keeps it so."""
    page = Page.fresh(tmp_path)
    env = {**page.env, "PYTHONVERBOSE": "1"}
    for command in ("taskloom --version", "PYTHONPATH=. taskloom --version"):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=page.project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        pattern = r"(?:matches|code object from) '?(\S+/taskloom/__init__\.py)"
        loaded = re.findall(pattern, done.stderr)
        assert loaded == [str(CHECKOUT / "src" / "taskloom" / "__init__.py")], done.stderr[-2000:]
