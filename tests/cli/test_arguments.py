"""Issue 17, item 1: the command line on click, without argparse's traps. Flags and
positional arguments in any order, repeated or comma-separated values, no prefix
matching, ``.py`` files for ``--workflows``, ``--workflow``/``--since`` filters."""

import json
from pathlib import Path
from typing import Any

import pytest

from taskloom.commands.app import FINISHED_STATES, TASK_STATES
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TERMINAL_STATES, TaskState
from tests.cli.test_commands import FLOWS, _in_db, cli, mistake

QUICK = '{"start": 1, "tick_s": 0}'


def _ids(out: str) -> list[str]:
    return [task["id"] for task in json.loads(out)["tasks"]]


def test_the_state_names_are_the_engines() -> None:
    assert tuple(state.value for state in TaskState) == TASK_STATES
    assert set(FINISHED_STATES) == {state.value for state in TERMINAL_STATES}


def test_the_workflow_may_follow_workflows_and_input_may_be_positional(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    marker = tmp_path / "m"
    arguments = json.dumps({"marker": str(marker)})
    code, out, _ = cli(
        capsys, "run", "--workflows", FLOWS, "fragile", "--input", arguments, "--db", db
    )
    assert code == 0, out
    code, out, _ = cli(capsys, "run", "fragile", arguments, "--workflows", FLOWS, "--db", db)
    assert code == 0, out  # the example of docs/workflows.md
    assert "give the arguments once" in mistake(
        capsys, "run", "fragile", arguments, "--input", arguments, "--workflows", FLOWS, "--db", db
    )


def test_no_long_option_is_taken_for_another_by_its_prefix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "db", "migrate", "--db", db)
    assert mistake(capsys, "tasks", "list", "--work", "countdown", "--db", db).startswith(
        "taskloom: error: No such option '--work'"
    )
    assert mistake(capsys, "run", "countdown", "--in", QUICK, "--db", db).startswith(
        "taskloom: error: No such option '--in'"
    )


def test_states_repeat_or_come_comma_separated_and_workflow_filters(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "run", "countdown", "--input", QUICK, "--db", db)
    cli(
        capsys,
        "run",
        "fragile",
        json.dumps({"marker": str(tmp_path / "m")}),
        "--workflows",
        FLOWS,
        "--db",
        db,
    )

    async def queue(manager: TaskManager) -> list[str]:
        queued = await manager.create("countdown", {"start": 1})
        cancelled = await manager.create("countdown", {"start": 2})
        await manager.cancel(cancelled.id)
        return [queued.id, cancelled.id]

    queued, cancelled = _in_db(Path(db), queue)
    listed = _ids(cli(capsys, "tasks", "list", "--db", db, "--json")[1])
    assert len(listed) == 4
    both = cli(capsys, "tasks", "list", "--state", "queued,cancelled", "--db", db, "--json")[1]
    assert _ids(both) == [cancelled, queued]
    repeated = cli(
        capsys, "tasks", "list", "--state", "queued", "--state", "cancelled", "--db", db, "--json"
    )[1]
    assert _ids(repeated) == [cancelled, queued]
    countdowns = _ids(
        cli(capsys, "tasks", "list", "--workflow", "countdown", "--db", db, "--json")[1]
    )
    assert len(countdowns) == 3
    assert listed[2] not in countdowns  # the fragile one
    monkeypatch.setenv("TASKLOOM_STATE", "queued cancelled")
    assert _ids(cli(capsys, "tasks", "list", "--db", db, "--json")[1]) == [cancelled, queued]


def test_a_filtered_list_pages_without_skipping(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "db", "migrate", "--db", db)

    async def many(manager: TaskManager) -> list[str]:
        ids: list[str] = []
        for number in range(7):
            name = "countdown" if number % 2 == 0 else "repo_audit"
            ids.append((await manager.create(name, {"start": 1, "path": "."})).id)
        return ids

    created: list[str] = _in_db(Path(db), many)
    wanted = [task_id for n, task_id in enumerate(created) if n % 2 == 0][::-1]
    seen: list[str] = []
    flags: list[str] = []
    for _ in range(3):
        out = cli(
            capsys,
            "tasks",
            "list",
            "--workflow",
            "countdown",
            "--limit",
            "2",
            *flags,
            "--db",
            db,
            "--json",
        )[1]
        page: dict[str, Any] = json.loads(out)
        seen += [task["id"] for task in page["tasks"]]
        if page["next_cursor"] is None:
            break
        flags = ["--cursor", page["next_cursor"]]
    assert seen == wanted


def test_since_takes_a_duration_or_an_iso_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    cli(capsys, "run", "countdown", "--input", QUICK, "--db", db)
    assert len(_ids(cli(capsys, "tasks", "list", "--since", "1h", "--db", db, "--json")[1])) == 1
    future = cli(capsys, "tasks", "list", "--since", "2999-01-01T00:00", "--db", db, "--json")[1]
    assert _ids(future) == []
    past = cli(capsys, "tasks", "list", "--since", "2001-01-01T00:00+02:00", "--db", db, "--json")[
        1
    ]
    assert len(_ids(past)) == 1
    assert "--since: 'yesterday' is neither a duration" in mistake(
        capsys, "tasks", "list", "--since", "yesterday", "--db", db
    )


def test_workflows_may_be_a_python_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = Path(FLOWS.replace(".", "/") + ".py").read_text()
    flows = tmp_path / "sub" / "my_file_flows.py"
    flows.parent.mkdir()
    flows.write_text(source)
    code, out, _ = cli(capsys, "workflows", "list", "--workflows", str(flows))
    assert code == 0
    assert "fragile" in out
    assert mistake(capsys, "workflows", "list", "--workflows", str(tmp_path / "none.py")) == (
        f"taskloom: error: --workflows {tmp_path / 'none.py'}: no such file\n"
    )
