"""Issue 17, item 2: the project file (``taskloom.toml`` or ``[tool.taskloom]``), found
from the current directory upwards; flags and variables override it; every hint the
command line prints works when copied as it is."""

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from taskloom.commands.project import load as load_project
from taskloom.persistence.sqlite.schema import latest_version
from tests.cli.test_commands import cli, mistake
from tests.helpers import checkout_env

FLOWS_SOURCE = Path(__file__).with_name("flows.py")

LATEST = latest_version()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project: taskloom.toml naming its database and a workflow file; the current
    directory is a subfolder two levels down."""
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "project_flows.py").write_text(FLOWS_SOURCE.read_text())
    (tmp_path / "taskloom.toml").write_text(
        'db = "state/tasks.db"\n'
        'workflows = ["flows/project_flows.py"]\n'
        "[settings.command_matrix]\n"
        'allowed_programs = ["echo"]\n'
    )
    (tmp_path / "state").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    monkeypatch.delenv("TASKLOOM_DB", raising=False)
    return tmp_path


def test_the_file_is_found_from_a_subfolder_with_paths_beside_it(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    marker = project / "m"
    code, out, _ = cli(capsys, "run", "fragile", json.dumps({"marker": str(marker)}))
    assert code == 0, out
    assert f"in {project / 'state' / 'tasks.db'}" in out.splitlines()[0]
    assert (project / "state" / "tasks.db").exists()
    listed = json.loads(cli(capsys, "tasks", "list", "--json")[1])["tasks"]
    assert [task["name"] for task in listed] == ["fragile"]
    code, out, _ = cli(capsys, "workflows", "show", "fragile")
    assert code == 0
    matrix = '{"commands": [{"argv": ["echo", "hi"]}]}'
    code, out, _ = cli(capsys, "run", "command_matrix", matrix)  # enabled by [settings]
    assert code == 0, out


def test_flags_and_variables_override_the_file(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli(capsys, "run", "countdown", '{"start": 1, "tick_s": 0}')
    other = project / "other.db"
    cli(capsys, "db", "migrate", "--db", str(other))
    assert json.loads(cli(capsys, "tasks", "list", "--db", str(other), "--json")[1])["tasks"] == []
    monkeypatch.setenv("TASKLOOM_DB", str(other))
    assert json.loads(cli(capsys, "tasks", "list", "--json")[1])["tasks"] == []
    monkeypatch.delenv("TASKLOOM_DB")
    assert len(json.loads(cli(capsys, "tasks", "list", "--json")[1])["tasks"]) == 1
    assert "command_matrix is disabled" in mistake(
        capsys,
        "run",
        "command_matrix",
        '{"commands": [{"argv": ["echo", "hi"]}]}',
        "--settings",
        "{}",
    )


def test_pyproject_tool_taskloom_and_a_bad_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.taskloom]\ndb = "p.db"\n')
    inner = tmp_path / "pkg"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no table: go on up
    monkeypatch.chdir(inner)
    monkeypatch.delenv("TASKLOOM_DB", raising=False)
    code, out, _ = cli(capsys, "db", "migrate")
    assert (code, out) == (0, f"{tmp_path / 'p.db'}: schema version {LATEST} (the latest)\n")
    (tmp_path / "taskloom.toml").write_text("nope = 1\n")
    assert mistake(capsys, "tasks", "list") == (
        f"taskloom: error: {tmp_path / 'taskloom.toml'}: nope: Extra inputs are not permitted\n"
    )
    (tmp_path / "taskloom.toml").write_text("db = [\n")
    assert mistake(capsys, "tasks", "list").startswith(
        f"taskloom: error: {tmp_path / 'taskloom.toml'} is not valid TOML: "
    )
    (tmp_path / "taskloom.toml").write_text("[worker]\nmax_runs = 'many'\n")
    assert "worker.max_runs: Input should be a valid integer" in mistake(capsys, "tasks", "list")


def _hint(out: str, prefix: str) -> list[str]:
    (line,) = [line for line in out.splitlines() if prefix in line]
    return shlex.split(line.split(prefix, 1)[1])


@pytest.mark.parametrize("with_project", [False, True], ids=["flags", "project file"])
def test_the_printed_resume_hint_works_as_it_is(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    with_project: bool,
) -> None:
    flows = tmp_path / "hint_flows.py"
    flows.write_text(FLOWS_SOURCE.read_text())
    monkeypatch.chdir(tmp_path)
    flags = ["--db", str(tmp_path / "t.db"), "--workflows", str(flows)]
    if with_project:
        (tmp_path / "taskloom.toml").write_text('db = "t.db"\nworkflows = ["hint_flows.py"]\n')
        flags = []
    marker = tmp_path / "m"
    marker.write_text("")
    code, out, _ = cli(capsys, "run", "fragile", json.dumps({"marker": str(marker)}), *flags)
    assert code == 1
    command = _hint(out, "run the rest later with: ")
    assert command[:3] == ["taskloom", "tasks", "resume"]
    assert ("--workflows" in command) is not with_project
    marker.unlink()
    code, out, _ = cli(capsys, *command[1:])
    assert code == 0, out
    assert "Completed: task " in out


@pytest.mark.slow
def test_watching_a_task_no_worker_runs_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "run", "countdown", '{"start": 1, "tick_s": 0}', "--db", db)
    task_id = json.loads(cli(capsys, "tasks", "list", "--db", db, "--json")[1])["tasks"][0]["id"]
    out = cli(capsys, "tasks", "resume", task_id, "--from", "report", "--db", db)[1]
    watch = _hint(out, "follow it with: ")
    assert watch[1:3] == ["tasks", "watch"]
    watcher = subprocess.Popen(
        [sys.executable, "-m", "taskloom", *watch[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=checkout_env(),
    )
    try:
        assert watcher.stdout is not None
        lines = []
        for line in watcher.stdout:  # bounded: the note comes after 5 s
            lines.append(line)
            if "no worker on this database runs countdown" in line:
                break
        assert "Start one with: taskloom worker --db" in lines[-1], lines
        worker = shlex.split(lines[-1].split("Start one with: ", 1)[1])
        assert worker == ["taskloom", "worker", "--db", db]
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=30) == 130
    finally:
        if watcher.poll() is None:
            watcher.kill()
        watcher.communicate(timeout=30)  # closes the pipe


def test_the_example_in_the_docs_is_a_valid_project_file(tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    section = page.split("### The project file", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "taskloom.toml").write_text(example)
    loaded = load_project(tmp_path / "taskloom.toml")
    assert loaded.value("db") == str(tmp_path / "var" / "tasks.db")
    assert loaded.value("workflows") == [
        "myproject.flows",
        str(tmp_path / "scripts" / "nightly.py"),
    ]
    assert loaded.value("http") == "127.0.0.1:8765"
    assert loaded.value("max_runs") == 20
    assert loaded.value("tokens_file") == str(tmp_path / "secrets" / "tokens.txt")


def test_taskloom_config_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "elsewhere.toml"
    named.write_text('db = "named.db"\n')
    monkeypatch.setenv("TASKLOOM_CONFIG", str(named))
    monkeypatch.delenv("TASKLOOM_DB", raising=False)
    assert (
        cli(capsys, "db", "migrate")[1]
        == f"{tmp_path / 'named.db'}: schema version {LATEST} (the latest)\n"
    )
    monkeypatch.setenv("TASKLOOM_CONFIG", str(tmp_path / "none.toml"))
    assert "TASKLOOM_CONFIG names" in mistake(capsys, "db", "migrate")


def test_a_bad_top_level_key_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The top-level keys are the setting table's, with the flags' choices and bounds
    (issue 27): a bad one is refused where the file is read, naming the key."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_CONFIG", raising=False)
    config = tmp_path / "taskloom.toml"
    config.write_text('log_level = "loud"\n')
    assert mistake(capsys, "worker", "--db", str(tmp_path / "w.db")) == (
        f"taskloom: error: {config}: log_level: "
        "Input should be 'debug', 'info', 'warning' or 'error'\n"
    )
    config.write_text('log_format = "yaml"\n')
    assert f"{config}: log_format: Input should be 'text' or 'json'" in mistake(
        capsys, "tasks", "list"
    )
    config.write_text("store_wait_s = 0\n")
    assert f"{config}: store_wait_s: Input should be greater than 0" in mistake(
        capsys, "tasks", "list"
    )
    config.write_text('log_level = "DEBUG"\nlog_format = "JSON"\n')  # any case, as the flag
    loaded = load_project(config)
    assert (loaded.value("log_level"), loaded.value("log_format")) == ("debug", "json")


def test_a_missing_option_is_not_blamed_on_the_project_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a value the project file gave is said to come from it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_CONFIG", raising=False)
    monkeypatch.delenv("TASKLOOM_PRINCIPAL", raising=False)
    db = str(tmp_path / "t.db")
    assert mistake(capsys, "tokens", "create", "--db", db) == (
        "taskloom: error: Missing option '--principal'. (see: taskloom tokens create --help)\n"
    )
    (tmp_path / "taskloom.toml").write_text('ttl = "soon"\n')
    assert mistake(capsys, "tokens", "create", "--db", db) == (
        "taskloom: error: Missing option '--principal'. (see: taskloom tokens create --help)\n"
    )
    assert mistake(capsys, "run", "countdown", "{}", "--db", db).endswith(
        "(from the project file)\n"
    )
