"""Issue 17, item 3 on the command line: ``run --ttl``, ``tasks delete`` and ``tasks purge``."""

import json
from datetime import timedelta
from pathlib import Path

import pytest

from taskloom.engine.manager import TaskManager
from tests.cli.test_commands import _in_db, cli, mistake

DAY_MS = 86_400_000
QUICK = '{"start": 1, "tick_s": 0}'


def _run(capsys: pytest.CaptureFixture[str], db: str, *flags: str) -> str:
    code, out, _ = cli(capsys, "run", "countdown", "--input", QUICK, "--db", db, *flags)
    assert code == 0
    return out.split(" as task ")[1].split()[0]


def _ttl(db: str, task_id: str) -> int | None:
    async def read(manager: TaskManager) -> int | None:
        return (await manager.get(task_id)).ttl_ms

    result: int | None = _in_db(Path(db), read)
    return result


@pytest.mark.parametrize(
    ("flags", "ttl_ms"),
    [
        ((), 30 * DAY_MS),
        (("--ttl", "7d"), 7 * DAY_MS),
        (("--ttl", "90m"), 90 * 60_000),
        (("--ttl", "forever"), 365 * DAY_MS),  # capped by max_ttl_ms
    ],
)
def test_run_keeps_its_task_30_days_or_as_ttl_says(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: tuple[str, ...], ttl_ms: int
) -> None:
    db = str(tmp_path / "t.db")
    assert _ttl(db, _run(capsys, db, *flags)) == ttl_ms


def test_a_bad_ttl_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = mistake(capsys, "run", "countdown", "--ttl", "soon", "--db", str(tmp_path / "t.db"))
    assert "'soon' is not a duration" in line


def test_delete_removes_finished_tasks_and_refuses_unfinished_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    first, second = _run(capsys, db), _run(capsys, db)

    async def queue(manager: TaskManager) -> str:
        return (await manager.create("countdown", {"start": 1})).id

    queued: str = _in_db(Path(db), queue)
    assert mistake(capsys, "tasks", "delete", first, queued, "--db", db) == (
        f"taskloom: error: task {queued} has not finished (queued); "
        f"cancel it first: taskloom tasks cancel {queued} --db {db}\n"
    )
    assert mistake(capsys, "tasks", "delete", "nope", "--db", db) == (
        "taskloom: error: task not found: nope\n"
    )
    _, out, _ = cli(capsys, "tasks", "list", "--db", db, "--json")
    assert len(json.loads(out)["tasks"]) == 3  # a refusal deletes nothing
    assert cli(capsys, "tasks", "delete", first, second, "--db", db)[:2] == (
        0,
        "deleted 2 task(s)\n",
    )
    _code, out, _ = cli(capsys, "tasks", "list", "--db", db, "--json")
    assert [task["id"] for task in json.loads(out)["tasks"]] == [queued]


def test_purge_deletes_what_finished_before_the_cutoff(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    _run(capsys, db)
    code, out, _ = cli(capsys, "tasks", "purge", "--older-than", "1d", "--db", db)
    assert (code, out.split(" (")[0]) == (0, "deleted 0 task(s)")
    code, out, _ = cli(
        capsys, "tasks", "purge", "--older-than", "0s", "--state", "failed", "--db", db, "--json"
    )
    assert json.loads(out)["deleted"] == 0
    code, out, _ = cli(capsys, "tasks", "purge", "--older-than", "0s", "--db", db)
    assert out.startswith("deleted 1 task(s) (cancelled, completed, failed) that finished before")
    assert "no tasks" in cli(capsys, "tasks", "list", "--db", db)[1]
    assert "--older-than" in mistake(capsys, "tasks", "purge", "--db", db)


def test_durations() -> None:
    from taskloom.commands.durations import duration, retention

    assert duration("90s") == timedelta(seconds=90)
    assert duration("2w") == timedelta(days=14)
    assert duration("1.5h") == timedelta(minutes=90)
    assert retention("forever") == "forever"
