"""repo_audit's file work: listing rules, reading odd files, shard progress, atomic reports."""

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from taskloom.engine.dag import MapContext, Workflow
from taskloom.workflows import files, reports
from taskloom.workflows.files import Listing, compile_markers, list_tree, scan_file
from taskloom.workflows.languages import language_of
from taskloom.workflows.repo_audit import RepoAuditInput, repo_audit

MARKERS = compile_markers(["TODO", "FIXME"])
AS_ROOT = os.geteuid() == 0


def _scan(root: Path, name: str, *, follow: bool = False, max_bytes: int = 1 << 20) -> Any:
    return scan_file(str(root), name, follow_symlinks=follow, max_bytes=max_bytes, markers=MARKERS)


def test_lines_and_markers_are_counted_across_chunk_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_CHUNK", 5)
    text = "a TODO b\nFIXME\n\nTODOS x TODO\nlast TODO"
    (tmp_path / "f.txt").write_text(text)
    stats = _scan(tmp_path, "f.txt")
    assert (stats.lines, stats.markers) == (5, {"TODO": 3, "FIXME": 1})
    assert stats.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert stats.size == len(text)


def test_an_empty_file_has_no_lines(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    stats = _scan(tmp_path, "empty")
    assert (stats.status, stats.lines, stats.sha256) == ("read", 0, hashlib.sha256().hexdigest())


def test_a_file_that_vanished_after_listing_is_described(tmp_path: Path) -> None:
    stats = _scan(tmp_path, "gone.py")
    assert (stats.status, stats.language, stats.sha256) == ("vanished", "Python", None)


def test_a_file_swapped_for_a_link_after_listing_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("secret\n")
    (tmp_path / "swapped").symlink_to(tmp_path / "target")
    stats = _scan(tmp_path, "swapped")
    assert stats.status == "unreadable"
    assert stats.error
    assert _scan(tmp_path, "swapped", follow=True).lines == 1


def test_a_pipe_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    stats = _scan(tmp_path, "pipe")
    assert (stats.status, stats.error) == ("unreadable", "not a regular file")
    assert list_tree(str(tmp_path), ignore=(), follow_symlinks=False, max_files=9).special == 1


@pytest.mark.skipif(AS_ROOT, reason="root reads files whatever their mode")
def test_unreadable_files_and_directories_are_described(tmp_path: Path) -> None:
    (tmp_path / "locked.txt").write_text("x")
    (tmp_path / "locked.txt").chmod(0)
    (tmp_path / "closed").mkdir()
    (tmp_path / "closed").chmod(0)
    try:
        listing = list_tree(str(tmp_path), ignore=(), follow_symlinks=False, max_files=9)
        stats = _scan(tmp_path, "locked.txt")
    finally:
        (tmp_path / "closed").chmod(0o700)
    assert listing.unreadable_dirs == ["closed"]
    assert (stats.status, stats.error) == ("unreadable", "Permission denied")


def test_ignore_patterns_match_names_or_relative_paths(tmp_path: Path) -> None:
    for path in ("keep/a.log", "keep/b.txt", "docs/build/x.html", "build/y.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    listing = list_tree(
        str(tmp_path), ignore=["*.log", "docs/build"], follow_symlinks=False, max_files=9
    )
    assert listing.files == ["build/y.txt", "keep/b.txt"]
    assert listing.ignored == 2


@pytest.mark.parametrize(
    ("path", "language"),
    [("a/b.PY", "Python"), ("Makefile", "Makefile"), ("x.tsx", "TypeScript"), ("x", "Other")],
)
def test_languages_come_from_names(path: str, language: str) -> None:
    assert language_of(path) == language


class _Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[float, float | None, str | None]] = []

    async def report(self, completed: float, total: float | None, message: str | None) -> None:
        self.reports.append((completed, total, message))

    async def ask(self, message: str, schema: dict[str, JsonValue]) -> JsonValue:
        raise AssertionError("repo_audit asks nothing")

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("repo_audit sleeps not")

    async def child(self, workflow: Workflow[Any], arguments: dict[str, JsonValue]) -> JsonValue:
        raise AssertionError("repo_audit starts no child")


async def test_a_batch_reads_its_span_and_reports_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # unconfigured, a local audit reads the working directory
    names = [f"f{index:03}.py" for index in range(150)]
    for name in names[:-1]:  # the last one vanished after the listing
        (tmp_path / name).write_text("# TODO\n")
    listing = Listing(root=str(tmp_path), files=names)
    plan = repo_audit.nodes["batches"]
    outputs: dict[str, JsonValue] = {"list_files": listing.model_dump(mode="json")}

    def context(node: Any, **extra: Any) -> Any:
        return MapContext(
            task_id="t",
            node=node,
            attempt=1,
            input=RepoAuditInput(path=str(tmp_path), shards=3),  # deprecated: ignored
            outputs=outputs,
            failed=frozenset(),
            runtime=recorder,
            **extra,
        )

    recorder = _Recorder()
    spans = await plan.function(context(plan, item=None, index=0))
    assert [(span.start, span.stop) for span in spans] == [(0, 64), (64, 128), (128, 150)]
    node = repo_audit.nodes["analyse"]
    found = await node.function(context(node, item=spans[2], index=2))
    assert [stats.path for stats in found] == names[128:]
    assert found[-1].status == "vanished"
    assert sum(stats.markers.get("TODO", 0) for stats in found) == 21
    assert recorder.reports == [(16, 22, "files"), (22, 22, "files")]


def test_a_failed_report_write_leaves_the_old_report_and_no_debris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r" / "report.json"
    reports.write_atomically(target, "old")

    def broken_replace(source: str, destination: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        reports.write_atomically(target, "new")
    assert target.read_text() == "old"
    assert [path.name for path in target.parent.iterdir()] == ["report.json"]


def test_permission_errors_are_described_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "locked.txt").write_text("x")
    (tmp_path / "closed").mkdir()
    real_open, real_scandir = os.open, os.scandir

    def refusing_open(path: str, flags: int) -> int:
        if path.endswith("locked.txt"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags)

    def refusing_scandir(path: str) -> Any:
        if path.endswith("closed"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "open", refusing_open)
    monkeypatch.setattr(os, "scandir", refusing_scandir)
    listing = list_tree(str(tmp_path), ignore=(), follow_symlinks=False, max_files=9)
    stats = _scan(tmp_path, "locked.txt")
    assert listing.unreadable_dirs == ["closed"]
    assert listing.files == ["locked.txt"]
    assert (stats.status, stats.error) == ("unreadable", "Permission denied")


def test_pseudo_file_systems_are_found_in_mountinfo(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n"
        "23 1 0:22 / /sys rw shared:6 - sysfs sysfs rw\n"
        "24 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n"
        "garbage\n"
    )
    assert files.pseudo_devices(str(mountinfo)) == {
        os.makedev(0, 21): "proc",
        os.makedev(0, 22): "sysfs",
    }
    assert files.pseudo_devices(str(tmp_path / "none")) == {}


needs_procfs = pytest.mark.skipif(
    os.stat("/proc/self").st_dev not in files.pseudo_devices(), reason="no procfs mounted here"
)


@needs_procfs
def test_procfs_is_refused_as_a_root_and_never_entered_or_read(tmp_path: Path) -> None:
    assert "kernel pseudo file system (proc)" in str(files.refuse_path("/proc/self", ["/"]))
    with pytest.raises(files.AuditPathError, match=r"pseudo file system \(proc\)"):
        list_tree("/proc/self", ignore=[], follow_symlinks=False, max_files=10)
    (tmp_path / "proc").symlink_to("/proc/self", target_is_directory=True)
    listing = list_tree(str(tmp_path), ignore=[], follow_symlinks=True, max_files=10)
    assert (listing.files, listing.special) == ([], 1)
    (tmp_path / "status").symlink_to("/proc/self/status")
    stats = scan_file(
        str(tmp_path),
        "status",
        follow_symlinks=True,
        max_bytes=1 << 20,
        markers=None,
        fence=files.Fence.of(None),
    )
    assert (stats.status, stats.error) == ("unreadable", "on a kernel pseudo file system (proc)")


def test_no_read_goes_past_the_limit_whatever_stat_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "liar").write_bytes(b"x" * 5000)
    real_fstat = os.fstat

    def zero_size(descriptor: int) -> os.stat_result:  # as procfs and growing files report
        info = real_fstat(descriptor)
        return os.stat_result((*info[:6], 0, *info[7:]))

    monkeypatch.setattr(files, "_CHUNK", 1000)
    monkeypatch.setattr(os, "fstat", zero_size)
    reads = 0

    def count() -> None:  # called before each read
        nonlocal reads
        reads += 1

    stats = scan_file(
        str(tmp_path), "liar", follow_symlinks=False, max_bytes=2500, markers=None, check=count
    )
    assert (stats.status, stats.sha256, stats.lines) == ("too_large", None, None)
    assert reads == 3  # 1000 + 1000 + 501 bytes: the read that passes the limit is the last


def test_the_check_stops_a_read_between_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "_CHUNK", 1000)
    (tmp_path / "big").write_bytes(b"y" * 100_000)
    calls = 0

    def cancel_on_the_third() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise KeyboardInterrupt("cancelled")

    with pytest.raises(KeyboardInterrupt):
        scan_file(
            str(tmp_path),
            "big",
            follow_symlinks=False,
            max_bytes=1 << 20,
            markers=None,
            check=cancel_on_the_third,
        )
    assert calls == 3
    calls = 2
    with pytest.raises(KeyboardInterrupt):
        list_tree(
            str(tmp_path), ignore=[], follow_symlinks=False, max_files=10, check=cancel_on_the_third
        )


def test_followed_links_stay_inside_the_allowed_roots(tmp_path: Path) -> None:
    inner, outer = tmp_path / "inner", tmp_path / "outer"
    inner.mkdir()
    outer.mkdir()
    (outer / "secret.txt").write_text("secret\n")
    (inner / "dir").symlink_to(outer, target_is_directory=True)
    (inner / "file").symlink_to(outer / "secret.txt")
    (inner / "own.txt").write_text("mine\n")
    listing = list_tree(
        str(inner), ignore=[], follow_symlinks=True, max_files=10, allowed_roots=[str(inner)]
    )
    assert (listing.files, listing.symlinks) == (["own.txt"], 2)
    stats = scan_file(
        str(inner),
        "file",
        follow_symlinks=True,
        max_bytes=1 << 20,
        markers=None,
        fence=files.Fence.of([str(inner)]),
    )
    assert (stats.status, stats.error) == ("unreadable", "a link out of the allowed directories")
    assert files.Fence.of([]).admits(str(inner)) is False
    assert files.Fence.of(None).admits("/anything") is True
