"""``version_report``: which version is the newest, and which is safe to remove, from what
this process loads, what live processes load and what stored runs need (ADR 0039)."""

from datetime import UTC, datetime

from taskloom.engine.versions import StoredVersion, VersionLine, version_report

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def _notes(lines: list[VersionLine]) -> dict[tuple[str, str | None], str]:
    return {(line.name, line.version): line.note for line in lines}


def test_listed_from_a_machine_that_loads_nothing_the_workers_newest_stays_newest() -> None:
    live = frozenset({("greet", "1"), ("greet", "2")})
    report = version_report((), live, [])
    assert _notes(report) == {
        ("greet", "1"): "safe to remove",
        ("greet", "2"): "newest: new calls get it",
    }


def test_the_newest_is_taken_over_here_and_live_processes_alike() -> None:
    stored = [StoredVersion(name="greet", version="1", unfinished=2, oldest=NOW)]
    report = version_report([("greet", "1")], frozenset({("greet", "1.10")}), stored)
    assert _notes(report) == {
        ("greet", "1"): "draining: 2 unfinished runs",
        ("greet", "1.10"): "newest: new calls get it",
    }
    assert [line.loaded_here for line in report] == [True, False]


def test_a_version_no_process_has_with_runs_is_orphaned_not_removable() -> None:
    stored = [StoredVersion(name="greet", version="1", unfinished=1, oldest=NOW)]
    (line,) = version_report((), frozenset(), stored)
    assert (line.orphaned, line.safe_to_remove) == (True, False)
    assert line.note == "no process has it: 1 run waits"
