"""`repo_audit`: list a directory tree, analyse its files in batches, write a report.

Phase ``list`` walks the tree (``.git``, ``node_modules``, virtualenvs and caches are
skipped by default; symbolic links are not followed) and cuts the sorted listing into
batches of :data:`FILES_PER_ITEM` files. Phase ``analyse`` is a map (ADR 0024): one
checkpointed item per batch, found at run time (100,000 files are about 1,600 items), at
most :data:`PARALLEL` read at once; a resumed run reads only the batches not done yet.
Each file's size, SHA-256,
line count, language (by name) and ``TODO``/``FIXME`` counts are taken; binary files get
no line count. Phase ``report`` adds it up and writes ``report.md`` and ``report.json``
atomically to ``<reports_dir>/<task id>/`` (``reports_dir`` is an operator setting).

Only directories under the operator's ``allowed_roots`` are read, links and ``..``
resolved first: unset, that is the working directory of a local process and nothing on an
HTTP server. A refused path is refused before a task exists. Every blocking step runs in a
worker thread that stops within one 1 MiB read of a cancel.
"""

import os
import re
from pathlib import Path
from typing import Final

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from taskloom.engine.dag import (
    MapContext,
    NodeContext,
    Workflow,
    check_cancelled,
    exposure_of,
    settings_of,
)
from taskloom.workflows.audit_report import (
    RepoAuditResult,
    render_json,
    render_markdown,
    summarise,
)
from taskloom.workflows.files import (
    DEFAULT_IGNORE,
    Fence,
    FileStats,
    Listing,
    compile_markers,
    list_tree,
    refuse_path,
    scan_file,
)
from taskloom.workflows.reports import write_atomically

PARALLEL: Final = 8
"""Batches read at once."""
FILES_PER_ITEM: Final = 64
"""Files of one item of the ``analyse`` map: its checkpoint's size and unit of re-work."""
BATCH: Final = 16
"""Files read per trip to a worker thread: progress is reported after each (a cancel is
seen sooner, between 1 MiB reads)."""
DEFAULT_REPORTS_DIR: Final = "taskloom-reports"


class RepoAuditSettings(BaseModel):
    """What the operator decides for every audit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reports_dir: str = DEFAULT_REPORTS_DIR
    """Where reports go, as ``<reports_dir>/<task id>/report.{md,json}``; a relative path is
    taken from the worker's working directory. Callers cannot choose it."""
    allowed_roots: tuple[str, ...] = Field(default=None, validate_default=True)
    """The directories that may be audited, with everything below them; kept with their
    links resolved. Unset: the working directory of a local process (stdio server, CLI,
    worker) unless that is ``/``, and nothing on an HTTP server. ``[]``: nothing."""

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _resolved_roots(cls, roots: object, info: ValidationInfo) -> object:
        if roots is None:
            here = os.getcwd()
            local = exposure_of(info) == "local" and here != os.path.realpath(os.sep)
            roots = (here,) if local else ()
        if isinstance(roots, list | tuple):
            return tuple(
                os.path.realpath(root) if isinstance(root, str) else root for root in roots
            )
        return roots


class RepoAuditInput(BaseModel):
    """Audit a directory tree: files, bytes, lines, languages, SHA-256, TODO/FIXME markers,
    largest files; writes a markdown and a JSON report."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="the directory to audit (relative: from the worker's working directory)",
    )
    ignore: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="more fnmatch patterns to skip: a name (`*.log`), or a relative path "
        "if it has a `/` (`docs/build`)",
    )
    default_ignores: bool = Field(
        default=True, description="also skip " + ", ".join(DEFAULT_IGNORE)
    )
    follow_symlinks: bool = Field(default=False, description="follow symbolic links")
    max_file_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        description="larger files are counted but not read (no hash, lines or markers)",
    )
    max_files: int = Field(
        default=100_000, ge=1, le=1_000_000, description="refuse trees with more files"
    )
    markers: list[str] = Field(
        default=["TODO", "FIXME"],
        max_length=20,
        description="words counted in text files (whole words, case-sensitive)",
    )
    top: int = Field(default=10, ge=0, le=1000, description="how many largest files to list")
    shards: int | None = Field(
        default=None,
        ge=1,
        description="deprecated and ignored since version 2 (files are read in batches of "
        f"{FILES_PER_ITEM}, {PARALLEL} at once); accepted so older callers keep working",
    )
    write_report: bool = Field(default=True, description="write report.md and report.json")

    @field_validator("path")
    @classmethod
    def _allowed_path(cls, path: str, info: ValidationInfo) -> str:
        if "\0" in path:
            raise ValueError("a path cannot contain a NUL character")
        refusal = refuse_path(path, settings_of(info, RepoAuditSettings).allowed_roots)
        if refusal is not None:
            raise ValueError(refusal)
        return path

    @field_validator("markers")
    @classmethod
    def _words(cls, markers: list[str]) -> list[str]:
        for marker in markers:
            if not re.fullmatch(r"\w{1,64}", marker):
                raise ValueError(f"marker {marker!r} must be one word of letters, digits or _")
        return list(dict.fromkeys(markers))

    def ignore_patterns(self) -> list[str]:
        """Every pattern that skips an entry."""
        return [*(DEFAULT_IGNORE if self.default_ignores else ()), *self.ignore]


def _settings(ctx: NodeContext[RepoAuditInput]) -> RepoAuditSettings:
    settings = ctx.settings
    return settings if isinstance(settings, RepoAuditSettings) else RepoAuditSettings()


repo_audit = Workflow(
    "repo_audit",
    version="2",
    input=RepoAuditInput,
    output=RepoAuditResult,
    settings=RepoAuditSettings,
    title="Repository audit",
    description=(
        "Scan a directory tree: file counts, bytes, lines and languages, SHA-256 of each "
        "file, TODO/FIXME counts and the largest files; writes a markdown and a JSON report."
    ),
    phases=["list", "analyse", "report"],
)


@repo_audit.node(phase="list")
async def list_files(ctx: NodeContext[RepoAuditInput]) -> Listing:
    """Walk the tree in a worker thread; a missing or forbidden root fails here, clearly."""
    listing = await ctx.run_blocking(
        lambda: list_tree(
            ctx.input.path,
            ignore=ctx.input.ignore_patterns(),
            follow_symlinks=ctx.input.follow_symlinks,
            max_files=ctx.input.max_files,
            allowed_roots=_settings(ctx).allowed_roots,
            check=check_cancelled,
        )
    )
    await ctx.report(len(listing.files), None, "files found")
    return listing


class Span(BaseModel):
    """One batch of the sorted listing: ``files[start:stop]``."""

    model_config = ConfigDict(frozen=True)

    start: int
    stop: int


@repo_audit.node(phase="list", deps=[list_files])
async def batches(ctx: NodeContext[RepoAuditInput]) -> list[Span]:
    """Cut the listing into batches of :data:`FILES_PER_ITEM` files (positions only: the
    listing is stored once)."""
    count = len(ctx.output(list_files).files)
    return [
        Span(start=start, stop=min(start + FILES_PER_ITEM, count))
        for start in range(0, count, FILES_PER_ITEM)
    ]


@repo_audit.map(over=batches, deps=[list_files], phase="analyse", concurrency=PARALLEL)
async def analyse(ctx: MapContext[RepoAuditInput, Span]) -> list[FileStats]:
    """Read one batch of files in a worker thread, a few at a time, reporting progress."""
    listing = ctx.output(list_files)
    mine = listing.files[ctx.item.start : ctx.item.stop]
    markers = compile_markers(ctx.input.markers)
    fence = Fence.of(_settings(ctx).allowed_roots)

    def scan(batch: list[str]) -> list[FileStats]:
        return [
            scan_file(
                listing.root,
                path,
                follow_symlinks=ctx.input.follow_symlinks,
                max_bytes=ctx.input.max_file_bytes,
                markers=markers,
                fence=fence,
                check=check_cancelled,
            )
            for path in batch
        ]

    found: list[FileStats] = []
    for start in range(0, len(mine), BATCH):
        found += await ctx.run_blocking(scan, mine[start : start + BATCH])
        await ctx.report(len(found), len(mine), "files")
    return found


@repo_audit.node(phase="report", deps=[list_files, analyse])
async def report(ctx: NodeContext[RepoAuditInput]) -> RepoAuditResult:
    """Add the batches up and write the report files (each replaced whole, never half
    written), in a worker thread: a large tree takes seconds."""
    folder = Path(await anyio.Path(_settings(ctx).reports_dir).absolute()) / ctx.task_id

    def build() -> RepoAuditResult:
        files = [stats for batch in ctx.output(analyse) for stats in batch]
        result = summarise(
            ctx.output(list_files), files, markers=ctx.input.markers, top=ctx.input.top
        )
        if ctx.input.write_report:
            result.report_markdown = str(folder / "report.md")
            result.report_json = str(folder / "report.json")
            write_atomically(folder / "report.json", render_json(ctx.task_id, result, files))
            markdown = render_markdown(ctx.task_id, result, files, top=ctx.input.top)
            write_atomically(folder / "report.md", markdown)
        return result

    return await ctx.run_blocking(build)
