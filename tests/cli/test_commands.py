"""The commands in-process (``main([...])``): outputs, ``--json``, exit codes, and one
clear line on stderr for every user mistake."""

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from taskloom.cli import main
from taskloom.commands.common import open_database
from taskloom.engine.ids import new_task_id
from taskloom.engine.models import InputRequest, Task
from taskloom.persistence.sqlite.schema import latest_version

FLOWS = "tests.cli.flows"

LATEST = latest_version()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``taskloom ARGV``; its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    out, err = capsys.readouterr()
    code = raised.value.code
    assert isinstance(code, int)
    assert "Traceback" not in out + err
    return code, out, err


def mistake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail as a user mistake: exit 2 and one line on stderr."""
    code, _, err = cli(capsys, *argv)
    assert code == 2, err
    assert err.count("\n") == 1, err
    return err


def _json(text: str) -> Any:
    return json.loads(text)


def _in_db(db: Path, work: Any) -> Any:
    async def run() -> Any:
        async with open_database(db) as local:
            return await work(local.manager)

    return anyio.run(run, backend="asyncio")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "t.db")


def test_run_completes_with_progress_and_exit_code_0(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    code, out, _ = cli(
        capsys, "run", "countdown", "--input", '{"start": 4, "tick_s": 0}', "--db", db
    )
    assert code == 0
    assert out.startswith("Running countdown as task ")
    assert "100%  completed" in out  # the plain (not a terminal) progress lines
    assert "Completed: task " in out
    assert out.endswith('Result:\n{\n  "counted": 4,\n  "lanes": 4\n}\n')  # the outcome, shown
    code, out, _ = cli(capsys, "tasks", "list", "--db", db, "--json")
    (task,) = _json(out)["tasks"]
    assert task["state"] == "completed"
    code, out, _ = cli(capsys, "tasks", "result", task["id"], "--db", db)
    assert (code, _json(out)) == (0, {"counted": 4, "lanes": 4})
    code, out, _ = cli(capsys, "tasks", "show", task["id"], "--db", db, "--json")
    nodes = {node["node"]: node for node in _json(out)["nodes"]}
    assert [node["phase"] for node in nodes.values()] == ["plan", *["count"] * 4, "report"]
    assert all(node["state"] == "completed" and node["attempts"] == 1 for node in nodes.values())
    history = _json(out)["attempts"]
    assert len(history) == 6
    assert {attempt["outcome"] for attempt in history} == {"completed"}
    assert all(attempt["worker"].endswith(":slot-0") for attempt in history)
    code, out, _ = cli(capsys, "tasks", "show", task["id"], "--db", db)
    assert "state      completed" in out
    assert "lane_3" in out


def test_a_failed_run_exits_1_and_resumes_from_the_failed_node(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    marker = tmp_path / "broken"
    marker.write_text("")
    arguments = json.dumps({"marker": str(marker)})
    input_file = tmp_path / "input.json"
    input_file.write_text(arguments)
    code, out, _ = cli(
        capsys, "run", "fragile", "--input", f"@{input_file}", "--db", db, "--workflows", FLOWS
    )
    assert code == 1
    assert "Failed: task " in out
    assert "the marker file exists" in out
    assert "nodes completed before it ended (1/3): prepare" in out
    failed_id = out.split("Failed: task ", 1)[1].split(":", 1)[0]
    code, _, err = cli(capsys, "tasks", "result", failed_id, "--db", db)
    assert code == 1
    assert err.startswith(f"taskloom: task {failed_id} failed: node 'use' failed")

    marker.unlink()  # the operator fixes the cause
    code, out, _ = cli(
        capsys, "tasks", "resume", failed_id, "--run", "--db", db, "--workflows", FLOWS
    )
    assert code == 0, out
    assert "kept (not run again): prepare" in out
    assert "runs again:           use, finish" in out
    assert "Completed: task " in out
    assert Path(str(marker) + ".log").read_text().split() == ["prepare", "use", "use", "finish"]
    new_id = out.split("Task ", 1)[1].split(" ", 1)[0]
    code, out, _ = cli(capsys, "tasks", "show", new_id, "--db", db, "--json", "--workflows", FLOWS)
    nodes = {node["node"]: node for node in _json(out)["nodes"]}
    assert nodes["prepare"]["kept"] is True
    assert nodes["prepare"]["attempts"] == 0
    assert _json(out)["task"]["result"] == 42
    code, out, _ = cli(capsys, "tasks", "result", failed_id, "--db", db, "--json")
    assert (code, _json(out)["state"]) == (1, "failed")  # the old task is left as it was


def test_resume_without_running_queues_a_task_for_a_worker(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    cli(capsys, "run", "countdown", "--input", '{"start": 4, "tick_s": 0}', "--db", db)
    task_id = _json(cli(capsys, "tasks", "list", "--db", db, "--json")[1])["tasks"][0]["id"]
    assert "completed every node" in mistake(capsys, "tasks", "resume", task_id, "--db", db)
    assert "has no node 'nope'" in mistake(
        capsys, "tasks", "resume", task_id, "--from", "nope", "--db", db
    )
    code, out, _ = cli(capsys, "tasks", "resume", task_id, "--from", "report", "--db", db, "--json")
    assert code == 0
    forked = _json(out)
    assert forked["resumes"] == task_id
    assert forked["kept"] == ["plan", "lane_0", "lane_1", "lane_2", "lane_3"]
    assert forked["rerun"] == ["report"]
    assert forked["task"]["state"] == "queued"


def test_cancel_and_answer(capsys: pytest.CaptureFixture[str], db: str) -> None:
    cli(capsys, "db", "migrate", "--db", db)

    async def waiting(manager: Any) -> tuple[Task, Task]:
        queued = await manager.create("countdown", {})
        asking = await manager.create("ask", {})
        await manager.start(asking.id)
        question = InputRequest(
            message="Name?", requested_schema={"type": "object", "required": ["name"]}
        )
        await manager.require_input(asking.id, "greet#1", question)
        return queued, asking

    queued, asking = _in_db(Path(db), waiting)
    code, out, _ = cli(capsys, "tasks", "cancel", queued.id, "--db", db)
    assert (code, out) == (
        0,
        f"Cancelled task {queued.id}; its running nodes stop within seconds.\n",
    )
    assert "has already ended (cancelled)" in mistake(
        capsys, "tasks", "cancel", queued.id, "--db", db
    )
    code, out, err = cli(capsys, "tasks", "result", queued.id, "--db", db)
    assert code == 130
    assert "was cancelled: cancelled by the operator" in err

    code, out, _ = cli(capsys, "tasks", "show", asking.id, "--db", db)
    assert "question   [greet#1] Name?" in out
    assert "does not match" in mistake(capsys, "tasks", "answer", asking.id, "{}", "--db", db)
    code, out, _ = cli(capsys, "tasks", "answer", asking.id, '{"name": "Ada"}', "--db", db)
    assert (code, out) == (0, f"Answered 'greet#1'; task {asking.id} is running.\n")
    assert "is not waiting for an answer" in mistake(
        capsys, "tasks", "answer", asking.id, "{}", "--db", db
    )
    assert "has not finished (running); pass --wait" in mistake(
        capsys, "tasks", "result", asking.id, "--db", db
    )
    code, out, _ = cli(capsys, "tasks", "show", asking.id, "--db", db)
    events = [line.split(maxsplit=2)[2] for line in out.split("timeline:\n", 1)[1].splitlines()[1:]]
    assert events == [
        "task created",
        "task running (claimed)",
        "task input_required (question)",
        "task running (answer)",
    ]  # the stored history's state changes (ADR 0036), with what caused each
    shown = _json(cli(capsys, "tasks", "show", asking.id, "--db", db, "--json")[1])
    assert [(change["state"], change["cause"]) for change in shown["history"]] == [
        ("queued", "created"),
        ("running", "claimed"),
        ("input_required", "question"),
        ("running", "answer"),
    ]


def test_watch_of_a_finished_task_prints_its_outcome(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    cli(
        capsys, "run", "countdown", "--input", '{"start": 4, "tick_s": 0, "fail_at": 2}', "--db", db
    )
    task_id = _json(cli(capsys, "tasks", "list", "--db", db, "--json")[1])["tasks"][0]["id"]
    code, out, _ = cli(capsys, "tasks", "watch", task_id, "--db", db)
    assert code == 1
    assert f"Failed: task {task_id}: node 'lane_" in out
    code, out, _ = cli(capsys, "tasks", "watch", task_id, "--db", db, "--json")
    assert code == 1
    assert _json(out.splitlines()[-1])["state"] == "failed"


def test_workflows_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "workflows", "list")
    assert code == 0
    assert out.splitlines()[0].split() == ["WORKFLOW", "VERSION", "NODES", "PHASES", "DESCRIPTION"]
    assert "countdown       1        6      plan > count > report" in out
    code, out, _ = cli(capsys, "workflows", "show", "countdown")
    assert "phase 2/3: count (4 nodes, in parallel)" in out
    assert "  [report] <- lane_0, lane_1, lane_2, lane_3   (gives the result)" in out
    assert "fail_at" in out
    code, out, _ = cli(capsys, "workflows", "show", "repo_audit", "--json")
    shown = _json(out)
    assert [phase["name"] for phase in shown["phases"]] == ["list", "analyse", "report"]
    assert [node["name"] for node in shown["phases"][1]["nodes"]] == ["analyse"]  # a map
    assert shown["input_schema"]["required"] == ["path"]


def test_db_migrate_check_gc(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = cli(capsys, "db", "migrate", "--db", db)
    assert (code, out) == (0, f"{db}: schema version {LATEST} (the latest)\n")
    code, out, _ = cli(capsys, "db", "check", "--db", db, "--json")
    checked = _json(out)
    assert (code, checked["problems"], checked["schema_version"]) == (0, [], latest_version())
    code, out, _ = cli(capsys, "db", "gc", "--db", db)
    assert (code, out) == (0, f"{db}: deleted 0 expired task(s)\n")


def test_the_environment_sets_every_flag(
    capsys: pytest.CaptureFixture[str], db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLOOM_DB", db)
    monkeypatch.setenv("TASKLOOM_INPUT", '{"start": 4, "tick_s": 0}')
    assert cli(capsys, "run", "countdown")[0] == 0
    monkeypatch.setenv("TASKLOOM_JSON", "1")
    monkeypatch.setenv("TASKLOOM_STATE", "completed, failed")
    monkeypatch.setenv("TASKLOOM_LIMIT", "1")
    first = _json(cli(capsys, "tasks", "list")[1])
    assert len(first["tasks"]) == 1
    assert first["next_cursor"] is None  # one task in the database
    monkeypatch.setenv("TASKLOOM_LIMIT", "many")
    assert mistake(capsys, "tasks", "list") == (
        "taskloom: error: Invalid value for '--limit': 'many' is not a valid integer. "
        "(from TASKLOOM_LIMIT)\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tasks", "show", "nope"], "taskloom: error: task not found: nope\n"),
        (["tasks", "result", "nope"], "taskloom: error: task not found: nope\n"),
        (["tasks", "cancel", "nope"], "taskloom: error: task not found: nope\n"),
        (["tasks", "watch", "nope"], "taskloom: error: task not found: nope\n"),
        (["run", "countdown", "--input", "{bad"], "--input is not valid JSON: Expecting"),
        (["run", "countdown", "--input", "[1]"], "--input must be a JSON object"),
        (["run", "countdown", "--input", "@/no/such/file"], "cannot read --input from /no/such"),
        (["run", "countdown", "--input", '{"start": 0}'], "invalid arguments for countdown: start"),
        (["run", "nope"], "no workflow is named 'nope' (known: command_matrix, countdown,"),
        (["workflows", "show", "nope"], "no workflow is named 'nope'"),
        (["tasks", "list", "--limit", "0"], "limit must be between 1 and 1000, got 0"),
        (["tasks", "list", "--state", "sleeping"], "'sleeping' is not one of queued, running,"),
        (["tasks", "list", "--state", "failed,nope"], "'nope' is not one of queued, running,"),
        (["tasks"], "choose a command: answer, cancel, delete, list, purge, result, resume,"),
    ],
)
def test_user_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], db: str, argv: list[str], message: str
) -> None:
    cli(capsys, "db", "migrate", "--db", db)
    assert message in mistake(
        capsys, *argv, *(["--db", db] if argv[0] in ("tasks", "run") and len(argv) > 1 else [])
    )


def test_a_missing_or_damaged_database_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.db")
    assert mistake(capsys, "tasks", "list", "--db", missing) == (
        f"taskloom: error: no taskloom database at {missing} (pass --db PATH or set TASKLOOM_DB)\n"
    )
    assert not Path(missing).exists()  # a read does not create a database
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    for argv in (["tasks", "list"], ["db", "check"], ["run", "countdown"]):
        assert "damaged.db" in mistake(capsys, *argv, "--db", str(damaged))
    for argv in (["tasks", "list"], ["db", "migrate"], ["run", "countdown"], ["worker"]):
        assert mistake(capsys, *argv, "--db", str(tmp_path)) == (
            f"taskloom: error: {tmp_path} is a directory; --db takes a database file\n"
        )


@pytest.mark.parametrize("argv", [["tasks", "list"], ["db", "migrate"], ["run", "countdown"]])
def test_a_bad_or_unreachable_database_url_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert mistake(capsys, *argv, "--db", "mysql://ann@db/app") == (
        "taskloom: error: unsupported database URL scheme 'mysql': "
        "give an SQLite file path or a postgresql:// URL\n"
    )
    refused = mistake(capsys, *argv, "--db", "postgresql://ann:s3cret@127.0.0.1:1/app")
    assert refused.startswith("taskloom: error: cannot connect to PostgreSQL ann@127.0.0.1:1/app")
    assert "s3cret" not in refused


def test_operator_settings_enable_a_workflow(capsys: pytest.CaptureFixture[str], db: str) -> None:
    matrix = '{"commands": [{"argv": ["echo", "hi"]}]}'
    assert "command_matrix is disabled" in mistake(
        capsys, "run", "command_matrix", "--input", matrix, "--db", db
    )
    allowed = '{"command_matrix": {"allowed_programs": ["echo"]}}'
    code, out, _ = cli(
        capsys, "run", "command_matrix", "--input", matrix, "--settings", allowed, "--db", db
    )
    assert code == 0, out
    assert "Completed: task " in out
    assert "invalid settings: nope: Extra inputs" in mistake(
        capsys, "run", "command_matrix", "--settings", '{"command_matrix": {"nope": 1}}'
    )
    assert "--settings maps workflow names to objects" in mistake(
        capsys, "run", "countdown", "--settings", '{"countdown": 1}'
    )


def test_task_ids_never_look_like_flags() -> None:
    ids = [new_task_id() for _ in range(3000)]  # about 47 would start with "-" by chance
    assert not [task_id for task_id in ids if task_id.startswith("-")]
    assert {len(task_id) for task_id in ids} == {24}


def test_an_id_that_starts_with_a_dash_goes_after_double_dash(
    capsys: pytest.CaptureFixture[str], db: str
) -> None:
    cli(capsys, "db", "migrate", "--db", db)
    assert "task not found: -abc" in mistake(capsys, "tasks", "show", "--db", db, "--", "-abc")


def test_list_pages_with_a_cursor(capsys: pytest.CaptureFixture[str], db: str) -> None:
    cli(capsys, "db", "migrate", "--db", db)

    async def three(manager: Any) -> list[str]:
        return [(await manager.create("countdown", {"start": n})).id for n in (1, 2, 3)]

    created = _in_db(Path(db), three)
    first = _json(cli(capsys, "tasks", "list", "--limit", "2", "--db", db, "--json")[1])
    assert [task["id"] for task in first["tasks"]] == created[:0:-1]  # newest first
    _, out, _ = cli(capsys, "tasks", "list", "--limit", "2", "--db", db)
    assert out.splitlines()[-1] == f"(more: --cursor {first['next_cursor']})"
    cursor = first["next_cursor"]
    rest = _json(cli(capsys, "tasks", "list", "--cursor", cursor, "--db", db, "--json")[1])
    assert ([task["id"] for task in rest["tasks"]], rest["next_cursor"]) == ([created[0]], None)
    assert "invalid cursor: 'nonsense'" in mistake(
        capsys, "tasks", "list", "--cursor", "nonsense", "--db", db
    )


def test_a_repo_audit_of_a_missing_folder_is_one_line_and_no_task(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26: refused before a task exists, not a failed task that suggests a resume."""
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "t.db")
    err = mistake(capsys, "run", "repo_audit", '{"path": "nope"}', "--db", db)
    assert "'nope' does not exist" in err
    assert "resume" not in err
    code, out, _ = cli(capsys, "tasks", "list", "--db", db, "--json")
    assert code == 0
    assert json.loads(out)["tasks"] == []
