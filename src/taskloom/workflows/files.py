"""The blocking file-system work of ``repo_audit``: list a tree, read one file.

Everything here blocks; the workflow runs it in worker threads. Nothing here raises for
one bad file: a file that cannot be read is described, not fatal.
"""

import fnmatch
import hashlib
import io
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel

from taskloom.workflows.languages import BINARY, OTHER, language_of

DEFAULT_IGNORE: Final = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
)
"""Names skipped unless ``default_ignores`` is off: VCS data, environments and caches."""

BINARY_SNIFF_BYTES: Final = 8192
"""A file with a NUL byte in its first 8 KiB is binary (git's rule)."""
_CHUNK: Final = 1 << 20
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_NON_BLOCK: Final = getattr(os, "O_NONBLOCK", 0)


class AuditPathError(ValueError):
    """The path to audit does not exist, is not a directory, or is not allowed."""


class TooManyFilesError(ValueError):
    """The tree holds more files than the caller allowed."""


class Listing(BaseModel):
    """The files found under a root, and what was skipped on the way."""

    root: str
    """The real, absolute path of the audited directory."""
    files: list[str]
    """Regular files, as sorted POSIX paths relative to ``root``."""
    ignored: int = 0
    """Files and directories skipped by an ignore pattern."""
    symlinks: int = 0
    """Symbolic links not followed."""
    special: int = 0
    """Sockets, pipes, devices, and links to nothing."""
    unreadable_dirs: list[str] = []
    """Directories that could not be listed (relative to ``root``)."""


FileStatus = Literal["read", "too_large", "unreadable", "vanished"]


class FileStats(BaseModel):
    """What one file holds."""

    path: str
    language: str
    status: FileStatus
    size: int | None = None
    sha256: str | None = None
    binary: bool = False
    lines: int | None = None
    """Lines of a text file (``None`` for binary files and files not read)."""
    markers: dict[str, int] = {}
    """Whole-word occurrences of each marker (``TODO``, ``FIXME``...) in a text file."""
    error: str | None = None


def ignored(name: str, relative: str, patterns: Sequence[str]) -> bool:
    """True if an entry is skipped: a pattern with a ``/`` matches its relative path, any
    other pattern its name (``fnmatch`` rules, case-sensitive)."""
    return any(
        fnmatch.fnmatchcase(relative if "/" in pattern else name, pattern) for pattern in patterns
    )


def inside(path: str, roots: Sequence[str]) -> bool:
    """True if the absolute *path* is one of *roots* or below one (no file-system access)."""
    for root in roots:
        base = os.path.abspath(root)
        if os.path.commonpath([path, base]) == base:
            return True
    return False


def list_tree(
    path: str,
    *,
    ignore: Sequence[str],
    follow_symlinks: bool,
    max_files: int,
    allowed_roots: Sequence[str] = (),
) -> Listing:
    """Every regular file under *path* that no pattern in *ignore* skips.

    *path* itself may be a symbolic link; links inside it are followed only with
    *follow_symlinks* (each directory is then entered once, so link loops end).

    Raises:
        AuditPathError: *path* does not exist, is not a directory, or (its links
            resolved) is outside every one of *allowed_roots* when they are given.
        TooManyFilesError: more than *max_files* files were found.
    """
    root = _root(path, allowed_roots)
    listing = Listing(root=root, files=[])
    root_stat = os.stat(root)
    seen = {(root_stat.st_dev, root_stat.st_ino)}
    pending = [""]
    while pending:
        relative_dir = pending.pop()
        try:
            with os.scandir(os.path.join(root, relative_dir)) as scan:
                entries = list(scan)
        except OSError:
            listing.unreadable_dirs.append(relative_dir or ".")
            continue
        for entry in entries:
            relative = f"{relative_dir}/{entry.name}" if relative_dir else entry.name
            if ignored(entry.name, relative, ignore):
                listing.ignored += 1
                continue
            kind = _kind(entry, follow_symlinks, seen)
            if kind == "dir":
                pending.append(relative)
            elif kind == "file":
                listing.files.append(relative)
                if len(listing.files) > max_files:
                    raise TooManyFilesError(
                        f"{path!r} holds more than {max_files} files; raise max_files "
                        "or add ignore patterns"
                    )
            elif kind == "symlink":
                listing.symlinks += 1
            elif kind == "special":
                listing.special += 1
    listing.files.sort()
    listing.unreadable_dirs.sort()
    return listing


def _root(path: str, allowed_roots: Sequence[str]) -> str:
    root = os.path.realpath(path)
    if not os.path.exists(root):
        raise AuditPathError(f"{path!r} does not exist")
    if not os.path.isdir(root):
        raise AuditPathError(f"{path!r} is not a directory")
    if allowed_roots and not inside(root, [os.path.realpath(r) for r in allowed_roots]):
        raise AuditPathError(f"{path!r} leads outside the directories this server may audit")
    return root


def _kind(entry: os.DirEntry[str], follow: bool, seen: set[tuple[int, int]]) -> str:
    try:
        if entry.is_symlink() and not follow:
            return "symlink"
        if entry.is_dir(follow_symlinks=follow):
            if follow:
                info = entry.stat()
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    return "seen"
                seen.add(key)
            return "dir"
        if entry.is_file(follow_symlinks=follow):
            return "file"
    except OSError:
        return "gone"  # vanished while listing
    return "special"


@dataclass(frozen=True)
class Markers:
    """Words to count in text, as whole words."""

    words: tuple[bytes, ...]
    pattern: re.Pattern[bytes]

    def count(self, data: bytes, counts: dict[str, int]) -> None:
        """Add the occurrences in *data* to *counts* (a plain search first: most text has
        none, and the pattern is slower)."""
        if not any(word in data for word in self.words):
            return
        for match in self.pattern.finditer(data):
            word = match.group(1).decode()
            counts[word] = counts.get(word, 0) + 1


def compile_markers(markers: Sequence[str]) -> Markers | None:
    """The :class:`Markers` for these words (``None`` for none)."""
    if not markers:
        return None
    words = tuple(marker.encode() for marker in markers)
    pattern = re.compile(rb"\b(" + b"|".join(re.escape(word) for word in words) + rb")\b")
    return Markers(words, pattern)


def scan_file(
    root: str,
    relative: str,
    *,
    follow_symlinks: bool,
    max_bytes: int,
    markers: Markers | None,
) -> FileStats:
    """Size, SHA-256, lines and markers of one file; a file that cannot be read is
    described (``unreadable`` or ``vanished``), never raised."""
    stats = FileStats(path=relative, language=language_of(relative), status="read")
    flags = os.O_RDONLY | _NON_BLOCK | (0 if follow_symlinks else _NO_FOLLOW)
    try:
        descriptor = os.open(os.path.join(root, relative), flags)
    except FileNotFoundError:
        stats.status = "vanished"
        return stats
    except OSError as error:
        stats.status, stats.error = "unreadable", error.strerror or str(error)
        return stats
    with open(descriptor, "rb", buffering=0, closefd=True) as file:
        info = os.fstat(descriptor)
        stats.size = info.st_size
        if not stat.S_ISREG(info.st_mode):
            stats.status, stats.error = "unreadable", "not a regular file"
        elif info.st_size > max_bytes:
            stats.status = "too_large"
        else:
            try:
                _read(file, stats, markers)
            except OSError as error:
                stats.status, stats.error = "unreadable", error.strerror or str(error)
    return stats


def _read(file: io.FileIO, stats: FileStats, markers: Markers | None) -> None:
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    size = newlines = 0
    tail = b""
    while chunk := file.read(_CHUNK):
        if size == 0 and b"\0" in chunk[:BINARY_SNIFF_BYTES]:
            stats.binary = True
        size += len(chunk)
        digest.update(chunk)
        if stats.binary:
            continue
        data = tail + chunk
        cut = data.rfind(b"\n") + 1
        complete, tail = data[:cut], data[cut:]
        newlines += complete.count(b"\n")
        if markers is not None:
            markers.count(complete, counts)
    stats.size = size  # what was read, should the file have changed since fstat
    stats.sha256 = digest.hexdigest()
    if stats.binary and stats.language == OTHER:
        stats.language = BINARY
    if not stats.binary:
        if markers is not None:
            markers.count(tail, counts)
        stats.lines = newlines + (1 if tail else 0)
        stats.markers = counts
