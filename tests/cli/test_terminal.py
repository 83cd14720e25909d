"""The command line in a real terminal (tmux) at 80 and 200 columns: what a person sees.

A live ``taskloom run`` of a multi-phase workflow is captured while it runs and when it
ends (``capture-pane -p``: the screen as drawn, not the bytes written): one header and one
line per phase, never stacked copies of the drawing, no line longer than the terminal.
``tasks show`` fits too, and a project file is found from a subfolder.
``scripts/ensure-tmux.sh`` (run by ``make unit``) installs tmux; without it these skip.
"""

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers import checkout_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("tmux") is None,
        reason="tmux is not installed (scripts/ensure-tmux.sh installs it on Debian)",
    ),
]

REPOSITORY = Path(__file__).resolve().parents[2]
WIDTHS = (80, 200)


class Tmux:
    """A tmux server of its own (its socket in a temporary folder), one window."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._servers = 0
        self._socket = ""

    def __call__(self, *argv: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self._socket, *argv],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def start(self, command: str, *, cwd: Path, width: int, height: int = 40) -> None:
        """Run *command* in a shell in a new window of *width* columns; the shell stays
        after it (so the screen can be read), and says ``EXIT <code>``."""
        self.stop()
        self._servers += 1
        self._socket = str(self._folder / f"tmux-{self._servers}.sock")
        shell = f"{command}; echo EXIT $?; sleep 600"
        path = shlex.quote("PYTHONPATH=" + checkout_env({})["PYTHONPATH"])
        environment = f"-u COLUMNS -u LINES {path} TERM=xterm-256color"
        self(
            "new-session",
            "-d",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            f"env {environment} sh -c {shlex.quote(shell)}",
        )

    def screen(self) -> list[str]:
        """The lines the terminal shows, a line that wrapped joined again (so a line too
        long for the terminal shows as such), trailing blanks dropped."""
        lines = self("capture-pane", "-p", "-J").rstrip("\n").split("\n")
        return [line.rstrip() for line in lines]

    def until(self, seen: Callable[[list[str]], bool], within_s: float = 60) -> list[str]:
        """The screen, once *seen* holds for it (bounded)."""
        deadline = time.monotonic() + within_s
        while True:
            screen = self.screen()
            if seen(screen):
                return screen
            assert time.monotonic() < deadline, "\n".join(screen)
            time.sleep(0.05)  # polling a screen: the condition, not the sleep, decides

    def type(self, text: str) -> None:
        """Type *text* and Enter."""
        if text:
            self("send-keys", "-l", text)
        self("send-keys", "Enter")

    def keys(self, *keys: str) -> None:
        """Press *keys* (tmux names: ``C-c``)."""
        self("send-keys", *keys)

    def stop(self) -> None:
        if self._socket:
            subprocess.run(
                ["tmux", "-S", self._socket, "kill-server"],
                capture_output=True,
                timeout=30,
                check=False,
            )


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    terminal = Tmux(tmp_path)
    try:
        yield terminal
    finally:
        terminal.stop()


@pytest.fixture
def db() -> Iterator[str]:
    """A database path short enough for an 80-column line, wherever pytest keeps its
    temporary folders (a path is never wrapped: a longer one could not fit)."""
    folder = tempfile.mkdtemp(prefix="tl-")
    try:
        yield f"{folder}/t.db"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def taskloom(*argv: str) -> str:
    return shlex.join([sys.executable, "-m", "taskloom", *argv])


def _fits(screen: list[str], width: int) -> None:
    """The drawing and the tables fit: no line wrapped (the lines printed once, which
    name a task or a path, may wrap like any shell output)."""
    once = ("Running ", "Failed: ", "Completed: ", "  run the rest later", "task ", "status ")
    too_long = [line for line in screen if len(line) > width and not line.startswith(once)]
    assert not too_long, "\n".join(screen)


def _starting(screen: list[str], word: str) -> list[str]:
    return [line for line in screen if line.split(" ", 1)[0] == word]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_live_run_draws_each_phase_once_and_fits_the_width(
    tmux: Tmux, tmp_path: Path, db: str, width: int
) -> None:
    arguments = json.dumps({"start": 600, "tick_s": 0.01})  # 1.5 s per lane
    tmux.start(taskloom("run", "countdown", arguments, "--db", db), cwd=tmp_path, width=width)

    def counting(screen: list[str]) -> bool:
        count = _starting(screen, "count")
        return bool(count) and "running lane_" in count[0]

    running = tmux.until(counting)
    _fits(running, width)
    assert running[0].startswith("Running countdown as task ")
    assert "  Ctrl-C cancels it." in running[1:3]  # after the line above, wrapped at a space
    header = [line for line in running if line.startswith("running ")]
    assert len(header) == 1, "\n".join(running)  # one drawing, redrawn in place
    assert "phase 2/3 count: " in header[0]
    at = running.index(header[0]) + 1
    assert [line.split()[0] for line in running[at : at + 3]] == ["plan", "count", "report"]
    assert running[at].split()[1:] == ["█" * 24, "1/1", "nodes"]
    assert "0/1 nodes" in running[at + 2]
    if width == 80:  # four lanes' names do not fit beside the bar: cut, not wrapped
        assert len(_starting(running, "count")) == 1

    done = tmux.until(lambda screen: "EXIT 0" in screen)
    _fits(done, width)
    for word in ("plan", "count", "report"):
        assert len(_starting(done, word)) == 1, "\n".join(done)  # no stacked redraws
    assert len([line for line in done if line.startswith("completed 100%")]) == 1
    assert _starting(done, "count")[0].split()[1:] == ["█" * 24, "4/4", "nodes"]
    assert any(line.startswith("Completed: task ") for line in done)
    assert not [line for line in done if line.startswith("running ")]


@pytest.mark.parametrize("width", WIDTHS)
def test_a_failed_run_and_tasks_show_name_only_the_failed_node(
    tmux: Tmux, tmp_path: Path, db: str, width: int
) -> None:
    failing = json.dumps({"start": 400, "tick_s": 0.002, "fail_at": 250})
    tmux.start(taskloom("run", "countdown", failing, "--db", db), cwd=tmp_path, width=width)
    done = tmux.until(lambda screen: "EXIT 1" in screen)
    _fits(done, width)
    (count,) = _starting(done, "count")
    assert "failed: lane_2" in count
    assert "lane_0" not in count  # the lanes stopped by the failure are not called failed
    assert "  failed: lane_2" in done
    resume = next(line for line in done if "run the rest later with:" in line)
    task_id = resume.split("taskloom tasks resume ", 1)[1].split()[0]
    tmux.stop()

    tmux.start(taskloom("tasks", "show", task_id, "--db", db), cwd=tmp_path, width=width)
    shown = tmux.until(lambda screen: "EXIT 0" in screen)
    _fits(shown, width)
    (header,) = [line for line in shown if line.startswith("PHASE")]
    assert header.split() == ["PHASE", "NODE", "STATE", "ATTEMPTS", "TOOK", "NOTE"]
    table = shown[shown.index(header) + 1 :]
    rows = table[: table.index("")]
    assert [row.split()[0] for row in rows if not row.startswith(" ")] == [
        "plan",
        "count",
        "report",
    ]
    node_at, state_at, attempts_at = (header.index(word) for word in ("NODE", "STATE", "ATTEMPTS"))
    states = {
        row[node_at:state_at].strip(): row[state_at:attempts_at].strip()
        for row in rows
        if row[node_at:state_at].strip()  # not a note's wrapped line
    }
    assert list(states) == ["plan", "lane_0", "lane_1", "lane_2", "lane_3", "report"]
    assert [node for node, state in states.items() if state == "failed"] == ["lane_2"]
    others = {states[lane] for lane in ("lane_0", "lane_1", "lane_3")}
    assert others <= {"completed", "stopped"}  # stopped or not depends on timing
    assert "the task was cancelled" not in "\n".join(shown)
    assert "timeline:" in shown


def test_the_project_file_is_found_from_a_subfolder(tmux: Tmux, tmp_path: Path) -> None:
    (tmp_path / "taskloom.toml").write_text('db = "tasks.db"\n')
    deep = tmp_path / "src" / "deep"
    deep.mkdir(parents=True)
    quick = json.dumps({"start": 4, "tick_s": 0})
    tmux.start(taskloom("run", "countdown", quick), cwd=deep, width=80)
    ran = tmux.until(lambda screen: "EXIT 0" in screen)
    assert ran[0].startswith("Running countdown as task ")
    assert str(tmp_path / "tasks.db") in "".join(ran[:2])  # perhaps cut at 80 columns
    assert not (deep / "taskloom.db").exists()
    tmux.stop()
    tmux.start(taskloom("tasks", "list"), cwd=deep, width=80)
    listed = tmux.until(lambda screen: "EXIT 0" in screen)
    assert listed[0].split() == ["ID", "WORKFLOW", "STATE", "CREATED", "TOOK", "STATUS"]
    assert listed[1].split()[1:3] == ["countdown", "completed"]


def _prompted(text: str) -> Callable[[list[str]], bool]:
    return lambda screen: bool(screen) and screen[-1].lstrip().startswith(text)


def test_a_question_is_a_form_of_one_prompt_per_field_at_80_columns(
    tmux: Tmux, tmp_path: Path, db: str
) -> None:
    """Issue 26, item 3: each field with its type, choices and default; ``yes`` is a yes;
    a wrong choice is asked again; the schema is never printed; nothing wider than 80."""
    command = taskloom("run", "launch", "--db", db, "--workflows", "tests.cli.flows")
    tmux.start(command, cwd=tmp_path, width=80)
    asked = tmux.until(_prompted("Pilot (text):"))
    message = " ".join(" ".join(asked).split())
    assert (
        "The task asks: Fill in the launch plan: who flies, with how many boosters, to which"
        " orbit, and whether anyone is on board (the answer is checked against the plan's"
        " rules)"
    ) in message
    tmux.type("Ada Lovelace")
    tmux.until(_prompted("Boosters (whole number, optional) (3):"))
    tmux.type("")  # the default
    tmux.until(_prompted("Orbit (one of) [low/high]:"))
    tmux.type("medium")
    tmux.until(lambda screen: "Please select one of the available options" in screen[-2])
    tmux.type("high")
    tmux.until(_prompted("Crewed (yes/no) [y/n]:"))
    tmux.type("yes")
    done = tmux.until(lambda screen: "EXIT 0" in screen)
    _fits(done, 80)
    text = "\n".join(done)
    assert "answered" in text
    for schema_word in ('"properties"', '"type"', "JSON matching", "please answer with JSON"):
        assert schema_word not in text
    tmux.stop()
    tmux.start(taskloom("tasks", "result", "--db", db, _only_task(db)), cwd=tmp_path, width=80)
    shown = tmux.until(lambda screen: "EXIT 0" in screen)
    result = json.loads("\n".join(shown[: shown.index("EXIT 0")]))
    assert result == {"pilot": "Ada Lovelace", "boosters": 3, "orbit": "high", "crewed": True}


def _only_task(db: str) -> str:
    listed = subprocess.run(
        [sys.executable, "-m", "taskloom", "tasks", "list", "--db", db, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=REPOSITORY,
    )
    (task,) = json.loads(listed.stdout)["tasks"]
    return str(task["id"])


def test_the_end_messages_wrap_at_word_boundaries_at_80_columns(
    tmux: Tmux, tmp_path: Path, db: str
) -> None:
    """Issue 26, item 4: the lines a cancelled run ends with are wrapped at spaces, never
    in a word (``Ctrl-`` at the end of one line, ``C`` on the next)."""
    arguments = json.dumps({"start": 6000, "tick_s": 0.01})
    command = taskloom("run", "countdown", arguments, "--db", db)
    tmux.start(f"trap true INT; {command}", cwd=tmp_path, width=80)  # the shell outlives C-c
    tmux.until(lambda screen: any("running lane_" in line for line in screen))
    tmux.keys("C-c")
    done = tmux.until(lambda screen: "EXIT 130" in screen)
    end = done[next(i for i, line in enumerate(done) if line.startswith("Cancelled: ")) :]
    too_long = [line for line in end if len(line) > 80]
    assert not too_long, "\n".join(done)  # capture -J joins what the terminal wrapped
    words = " ".join(" ".join(end).split())
    assert "cancelled from the command line (Ctrl-C)." in words
    assert "run the rest later with: taskloom tasks resume " in words


def test_serve_in_a_terminal_says_it_waits_for_a_host(tmux: Tmux, tmp_path: Path) -> None:
    """Issue 26, item 4: over stdio in a terminal, one line on stderr, so it does not
    look hung; Ctrl-C stops it."""
    command = taskloom("serve", "--db", str(tmp_path / "t.db"))
    tmux.start(f"trap true INT; {command}", cwd=tmp_path, width=80)
    waiting = tmux.until(lambda screen: any("stdio" in line for line in screen))
    said = [line for line in waiting if line.strip()]
    assert said == ["taskloom: serving MCP over stdio, waiting for a host on stdin (Ctrl-C stops)"]
    tmux.keys("C-c")
    done = tmux.until(lambda screen: any(line.startswith("EXIT ") for line in screen))
    assert "EXIT 0" in done, "\n".join(done)
    assert "Traceback" not in "\n".join(done)
