"""``repo_audit``'s summary and its two report files (markdown for people, JSON for tools)."""

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from pydantic import BaseModel

from taskloom.workflows.files import FileStats, Listing
from taskloom.workflows.reports import markdown_table

MAX_PROBLEMS_SHOWN: Final = 20
REPORT_FORMAT: Final = 1
"""Bumped when the JSON report changes shape."""


class LanguageStats(BaseModel):
    """Files, bytes and lines of one language."""

    language: str
    files: int
    bytes: int
    lines: int


class LargeFile(BaseModel):
    """A file and its size."""

    path: str
    bytes: int


class FileProblem(BaseModel):
    """A file or directory that could not be read, and why."""

    path: str
    problem: str


class RepoAuditResult(BaseModel):
    """The summary of an audit (the full per-file table is in the JSON report)."""

    root: str
    files: int
    bytes: int
    lines: int
    """Lines of the text files that were read."""
    binary_files: int
    too_large: int
    """Files larger than ``max_file_bytes``: counted, not read (no hash, lines or markers)."""
    problems: int
    """Files that were unreadable or vanished, and directories that could not be listed."""
    ignored: int
    symlinks_skipped: int
    languages: list[LanguageStats]
    """By bytes, largest first."""
    markers: dict[str, int]
    largest: list[LargeFile]
    first_problems: list[FileProblem]
    report_markdown: str | None = None
    report_json: str | None = None


def summarise(
    listing: Listing, files: Sequence[FileStats], *, markers: Sequence[str], top: int
) -> RepoAuditResult:
    """Totals, the language table, marker counts, the largest files and the problems."""
    languages: dict[str, LanguageStats] = {}
    counts = dict.fromkeys(markers, 0)
    problems = [FileProblem(path=path, problem="cannot list") for path in listing.unreadable_dirs]
    for stats in files:
        row = languages.setdefault(
            stats.language, LanguageStats(language=stats.language, files=0, bytes=0, lines=0)
        )
        row.files += 1
        row.bytes += stats.size or 0
        row.lines += stats.lines or 0
        for marker, count in stats.markers.items():
            counts[marker] = counts.get(marker, 0) + count
        if stats.status in ("unreadable", "vanished"):
            problems.append(FileProblem(path=stats.path, problem=stats.error or stats.status))
    by_size = sorted(files, key=lambda stats: (-(stats.size or 0), stats.path))
    return RepoAuditResult(
        root=listing.root,
        files=len(files),
        bytes=sum(stats.size or 0 for stats in files),
        lines=sum(stats.lines or 0 for stats in files),
        binary_files=sum(stats.binary for stats in files),
        too_large=sum(stats.status == "too_large" for stats in files),
        problems=len(problems),
        ignored=listing.ignored,
        symlinks_skipped=listing.symlinks,
        languages=sorted(languages.values(), key=lambda row: (-row.bytes, row.language)),
        markers=counts,
        largest=[LargeFile(path=s.path, bytes=s.size or 0) for s in by_size[:top] if s.size],
        first_problems=problems[:MAX_PROBLEMS_SHOWN],
    )


def render_json(task_id: str, result: RepoAuditResult, files: Sequence[FileStats]) -> str:
    """The machine-readable report: the summary and one record per file, by path."""
    document = {
        "format": REPORT_FORMAT,
        "workflow": "repo_audit",
        "task_id": task_id,
        "generated_at": datetime.now(UTC).isoformat(),
        "summary": result.model_dump(mode="json"),
        "files": [stats.model_dump(mode="json") for stats in sorted(files, key=lambda s: s.path)],
    }
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def render_markdown(
    task_id: str, result: RepoAuditResult, files: Sequence[FileStats], *, top: int
) -> str:
    """The report a person reads: totals, languages, markers, largest files, problems."""
    lines = [
        f"# Audit of `{result.root}`",
        "",
        f"Task `{task_id}`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        *markdown_table(["", "count"], _totals(result), "lr"),
        "",
        "## Languages",
        "",
        *markdown_table(
            ["language", "files", "bytes", "lines"],
            [
                [row.language, f"{row.files:,}", f"{row.bytes:,}", f"{row.lines:,}"]
                for row in result.languages
            ],
            "lrrr",
        ),
    ]
    if result.markers:
        marked = sorted(
            (s for s in files if s.markers), key=lambda s: (-sum(s.markers.values()), s.path)
        )
        names = list(result.markers)
        lines += ["", "## Markers", "", ", ".join(f"{k}: {v:,}" for k, v in result.markers.items())]
        if marked and top:
            lines += [
                "",
                *markdown_table(
                    ["file", *names],
                    [[s.path, *(str(s.markers.get(n, 0)) for n in names)] for s in marked[:top]],
                    "l" + "r" * len(names),
                ),
            ]
    if result.largest:
        lines += ["", "## Largest files", ""]
        lines += markdown_table(
            ["file", "bytes"], [[f.path, f"{f.bytes:,}"] for f in result.largest], "lr"
        )
    if result.first_problems:
        lines += ["", f"## Problems ({result.problems})", ""]
        lines += markdown_table(
            ["path", "problem"], [[p.path, p.problem] for p in result.first_problems], "ll"
        )
    return "\n".join(lines) + "\n"


def _totals(result: RepoAuditResult) -> list[list[str]]:
    return [
        ["files", f"{result.files:,}"],
        ["bytes", f"{result.bytes:,}"],
        ["lines (text files)", f"{result.lines:,}"],
        ["binary files", f"{result.binary_files:,}"],
        ["too large to read", f"{result.too_large:,}"],
        ["problems", f"{result.problems:,}"],
        ["ignored entries", f"{result.ignored:,}"],
        ["symbolic links skipped", f"{result.symlinks_skipped:,}"],
    ]
