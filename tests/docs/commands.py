"""Running the shell commands of the docs (used by test_commands.py; rules in ADR 0035).

The ```` ```console ````, ```` ```shell ````, ```` ```sh ```` and ```` ```bash ```` blocks of
README.md and docs/ are run, page by page, as a user would type them:

- In a ``console`` block a command is a line starting with ``$ ``; the other lines are
  its expected output. In the other languages every line is a command (``#`` lines
  aside). A line ending with `` \\`` continues on the next.
- ``<!-- not-run: why -->`` just before a block skips it (the reason stays in the page).
- Each page runs in a fresh project directory (a copy of ``tests/docs/project``: a
  ``src/`` to scan and a ``myproject/flows.py``) with its own ``HOME``, the venv's
  ``taskloom`` first on ``PATH``, and no ``TASKLOOM_*`` variable from outside. Commands
  run in order by ``bash -c``, after the page's ``export`` lines so far; the database and
  files they leave are the next command's.
- A command must exit 0 within :data:`COMMAND_S` with no traceback. Each expected output
  line must be a line of its output (stdout and stderr), in order, trailing spaces aside.
- An abbreviated task id (``8kV3...``: four id characters and three dots) is bound, the
  first time the page names it, to the newest task of the project's database; it is
  that task's id in later commands and in expected output. An abbreviation never named
  in a command matches any task id in expected output.
- ``taskloom serve``, ``taskloom worker`` and ``taskloom ui`` run until stopped: they must
  say they are ready within :data:`READY_S` (``serving MCP at`` over HTTP; a stdio server
  answers an ``initialize`` written to its stdin; a worker prints ``runs:``; ``ui`` prints
  ``serving the dashboard at``), then get SIGINT and
  must exit 0 within :data:`STOP_S`.
- A ``postgresql://`` URL in a command (an ``export TASKLOOM_DB=...`` too) stands for a
  database of the page's own on the test server (``TASKLOOM_TEST_POSTGRES_URL``, see
  ``tests/postgres.py``): created the first time the page names one, dropped after the
  page. The docs show a user's URL; the suite runs the commands on a database no other
  test sees. Expected output is matched as printed, so it should not show the URL.
- ``pip install taskloom`` and ``pip install 'taskloom[EXTRA]'`` are not run (they would
  install from the registry over this checkout): the environment must have taskloom and
  every requirement of EXTRA installed, so an extra that does not exist fails.
"""

import contextlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import anyio
from anyio.abc import Process
from packaging.requirements import Requirement

from tests import postgres
from tests.docs.snippets import Snippet, snippets
from tests.helpers import CHECKOUT, initialize_line

LANGUAGES: Final = ("console", "shell", "sh", "bash")
PROJECT: Final = Path(__file__).resolve().parent / "project"
COMMAND_S: Final = 60.0
READY_S: Final = 30.0
STOP_S: Final = 20.0
ABBREVIATED: Final = re.compile(r"(?<![\w.-])([A-Za-z0-9_-]{4})\.\.\.")
TASK_ID: Final = r"[A-Za-z0-9_-]{8,}"
ASSIGNMENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
POSTGRES_URL: Final = re.compile(r"postgres(?:ql)?://[^\s'\"]+")


class CommandFailed(Exception):
    """A command of the docs that failed: the message names its page and line."""


@dataclass(frozen=True)
class Command:
    """One command of a block, and the output lines shown after it."""

    block: Snippet
    line: int
    text: str
    expected: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.block.where.rsplit(':', 1)[0]}:{self.line}"


def command_blocks(page: Path) -> list[Snippet]:
    """*page*'s command blocks, in page order."""
    found = [block for language in LANGUAGES for block in snippets(page, language)]
    return sorted(found, key=lambda block: block.line)


def commands(block: Snippet, *, console: bool) -> list[Command]:
    """The commands of *block* (a ``console`` block when *console*), in order."""
    found: list[Command] = []
    lines = block.code.splitlines()
    index = 0
    while index < len(lines):
        line, number = lines[index], block.line + index
        index += 1
        if console and not line.startswith("$ "):
            if found and line.strip():
                last = found[-1]
                found[-1] = Command(last.block, last.line, last.text, (*last.expected, line))
            continue
        text = line[2:] if console else line
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        while text.endswith("\\") and index < len(lines):
            text = text[:-1] + " " + lines[index].strip()
            index += 1
        found.append(Command(block, number, text))
    return found


@dataclass
class Page:
    """The state of one page's run: its project directory, exports, task ids and
    PostgreSQL database (made on first use, dropped by :attr:`cleanup`)."""

    project: Path
    env: dict[str, str]
    exports: list[str] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)
    database: str | None = None
    cleanup: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @classmethod
    def fresh(cls, where: Path) -> "Page":
        """A project copied into *where*, with an environment of its own."""
        project = where / "project"
        shutil.copytree(PROJECT, project)
        (project / "home").mkdir()
        env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM")}
        bin_dirs = [str(_checkout_taskloom(where / "bin")), str(Path(sys.executable).parent)]
        env.update(PATH=os.pathsep.join([*bin_dirs, env.get("PATH", "")]))
        env.update(HOME=str(project / "home"))
        env.pop("PYTHONPATH", None)
        return cls(project, env)


def _checkout_taskloom(folder: Path) -> Path:
    """*folder*, holding a ``taskloom`` command that runs this checkout's code: the venv's
    own may be another checkout's (its editable install), as from a git worktree. Its
    processes' children (a lingering worker) get this checkout's ``src`` too, ahead of
    a page's own ``PYTHONPATH``."""
    folder.mkdir()
    source = str(CHECKOUT / "src")
    command = folder / "taskloom"
    command.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"sys.path.insert(0, {source!r})\n"
        f"paths = [{source!r}, os.environ.get('PYTHONPATH', '')]\n"
        "os.environ['PYTHONPATH'] = os.pathsep.join(path for path in paths if path)\n"
        "from taskloom.cli import main\n"
        "sys.exit(main())\n"
    )
    command.chmod(0o755)
    return folder


async def run_page(page: Path, where: Path) -> int:
    """Run every command block of *page* in a fresh project under *where*; how many
    commands ran.

    Raises:
        CommandFailed: a command failed (see the module docstring).
    """
    state = Page.fresh(where)
    ran = 0
    with state.cleanup:
        for block in command_blocks(page):
            if block.skipped:
                continue
            for command in commands(block, console=_is_console(page, block)):
                await run_command(command, state)
                ran += 1
    return ran


def _is_console(page: Path, block: Snippet) -> bool:
    fence = page.read_text(encoding="utf-8").splitlines()[block.line - 2]
    return fence.strip() == "```console"


async def run_command(command: Command, page: Page) -> None:
    """Run *command* in *page*'s project (see the module docstring)."""
    command = await _on_private_postgres(command, page)
    words = shlex.split(command.text, comments=True)
    if words[:1] == ["export"]:
        page.exports.append(command.text)
        return
    if words[:2] == ["pip", "install"]:
        _check_installed(command, words[2:])
        return
    text = await _bind_ids(command, page)
    while words and ASSIGNMENT.match(words[0]):  # VAR=value before the program
        words = words[1:]
    script = "; ".join([*page.exports, text])
    if words[:2] in (["taskloom", "serve"], ["taskloom", "worker"], ["taskloom", "ui"]):
        output = await _until_ready(command, script, page, program=words[1], http="--http" in words)
    else:
        output = await _run(command, script, page)
    if "Traceback" in output:
        raise CommandFailed(f"{command.where}: `{command.text}` shows a traceback:\n{output}")
    _check_output(command, output, page)


async def _on_private_postgres(command: Command, page: Page) -> Command:
    """*command* with each ``postgresql://`` URL replaced by the page's own database."""
    if not POSTGRES_URL.search(command.text):
        return command
    if page.database is None:
        database = postgres.private_database()
        page.database = await anyio.to_thread.run_sync(page.cleanup.enter_context, database)
    url = page.database
    return replace(command, text=POSTGRES_URL.sub(lambda _: url, command.text))


async def _bind_ids(command: Command, page: Page) -> str:
    """*command*'s text with each abbreviated task id replaced by its task's id."""
    for abbreviation in ABBREVIATED.findall(command.text):
        if abbreviation not in page.ids:
            page.ids[abbreviation] = await _newest_task(command, page)
    return ABBREVIATED.sub(lambda found: page.ids[found.group(1)], command.text)


async def _newest_task(command: Command, page: Page) -> str:
    try:
        script = "; ".join([*page.exports, "taskloom tasks list --json --limit 1"])
        listed = await _run(command, script, page, stderr=False)
    except CommandFailed:  # no database yet
        listed = '{"tasks": []}'
    tasks = json.loads(listed)["tasks"]
    if not tasks:
        raise CommandFailed(f"{command.where}: names a task, but the database has none")
    task_id: str = tasks[0]["id"]
    return task_id


async def _run(command: Command, script: str, page: Page, *, stderr: bool = True) -> str:
    try:
        with anyio.fail_after(COMMAND_S):
            done = await anyio.run_process(
                ["bash", "-c", script],
                cwd=page.project,
                env=page.env,
                stdin=subprocess.DEVNULL,
                stderr=subprocess.STDOUT if stderr else subprocess.PIPE,
                check=False,
            )
    except TimeoutError:
        raise CommandFailed(f"{command.where}: `{command.text}` ran over {COMMAND_S} s") from None
    output = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        raise CommandFailed(
            f"{command.where}: `{command.text}` exited with {done.returncode}:\n{output}"
        )
    return output


async def _until_ready(
    command: Command, script: str, page: Page, *, program: str, http: bool
) -> str:
    """Start a long-running command, wait until it is ready, stop it; its output."""
    process = await anyio.open_process(
        ["bash", "-c", script],
        cwd=page.project,
        env=page.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # SIGINT reaches bash and the command alike
    )
    output = bytearray()
    if http or program in ("worker", "ui"):
        phrase = {"worker": b"runs:", "ui": b"serving the dashboard at"}.get(
            program, b"serving MCP at"
        )
        ready: Callable[[], bool] = lambda: phrase in output
    else:  # a stdio server: it speaks when spoken to
        assert process.stdin is not None
        await process.stdin.send(initialize_line("docs").encode())
        ready = lambda: b'"id":1' in output and b'"result"' in output
    try:
        await _read_until(process, output, ready, command)
    finally:
        _signal(process, signal.SIGINT)
        with anyio.move_on_after(STOP_S) as stopping:
            await _drain(process, output)
            await process.wait()
        if stopping.cancelled_caught:
            _signal(process, signal.SIGKILL)
            await process.wait()
    text = output.decode(errors="replace")
    if process.returncode != 0:
        raise CommandFailed(
            f"{command.where}: `{command.text}` did not stop cleanly on SIGINT "
            f"(exit {process.returncode}):\n{text}"
        )
    return text


def _signal(process: Process, number: signal.Signals) -> None:
    """Send *number* to the process group of *process* (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, number)


async def _read_until(
    process: Process, output: bytearray, ready: Callable[[], bool], command: Command
) -> None:
    assert process.stdout is not None
    try:
        with anyio.fail_after(READY_S):
            while not ready():
                output += await process.stdout.receive()
    except anyio.EndOfStream:
        shown = output.decode(errors="replace")
        raise CommandFailed(f"{command.where}: `{command.text}` ended:\n{shown}") from None
    except TimeoutError:
        shown = output.decode(errors="replace")
        raise CommandFailed(
            f"{command.where}: `{command.text}` was not ready within {READY_S} s:\n{shown}"
        ) from None


async def _drain(process: Process, output: bytearray) -> None:
    assert process.stdout is not None
    try:
        while True:
            output += await process.stdout.receive()
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        return


def _check_output(command: Command, output: str, page: Page) -> None:
    """Each expected line of *command* is a line of *output*, in order."""
    lines = [line.rstrip() for line in output.splitlines()]
    position = 0
    for expected in command.expected:
        pattern = _line_pattern(expected.rstrip(), page)
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            raise CommandFailed(
                f"{command.where}: `{command.text}` does not print {expected!r} "
                f"(in this order); it printed:\n{output}"
            )
        position += 1


def _line_pattern(expected: str, page: Page) -> re.Pattern[str]:
    parts: list[str] = []
    last = 0
    for found in ABBREVIATED.finditer(expected):
        parts.append(re.escape(expected[last : found.start()]))
        bound = page.ids.get(found.group(1))
        parts.append(re.escape(bound) if bound is not None else TASK_ID)
        last = found.end()
    parts.append(re.escape(expected[last:]))
    return re.compile("".join(parts))


def _check_installed(command: Command, arguments: list[str]) -> None:
    """``pip install taskloom[EXTRA]``: taskloom and the extra's requirements are here."""
    for argument in arguments:
        wanted = Requirement(argument)
        if wanted.name != "taskloom":
            raise CommandFailed(f"{command.where}: installs {wanted.name}, not taskloom")
        requirements = [Requirement(text) for text in importlib.metadata.requires("taskloom") or []]
        for extra in wanted.extras:
            needed = [r for r in requirements if r.marker and r.marker.evaluate({"extra": extra})]
            if not needed:
                raise CommandFailed(f"{command.where}: taskloom has no extra {extra!r}")
            for requirement in needed:
                try:
                    importlib.metadata.version(requirement.name)
                except importlib.metadata.PackageNotFoundError:
                    raise CommandFailed(
                        f"{command.where}: {requirement.name} (extra {extra!r}) is not installed"
                    ) from None
