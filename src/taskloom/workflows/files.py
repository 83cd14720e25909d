"""The blocking file-system work of ``repo_audit``: list a tree, read one file.

Everything here blocks; the workflow runs it in worker threads and passes a *check* that
raises once the node is cancelled, called between directories and between 1 MiB reads.
Nothing here raises for one bad file: a file that cannot be read is described, not fatal.
Only regular files on real file systems are read: pipes, sockets, devices and everything
on a kernel pseudo file system (``/proc``, ``/sys``...) are skipped, and no read goes past
the size limit, whatever ``stat`` said.
"""

import fnmatch
import hashlib
import io
import os
import re
import stat
from collections.abc import Callable, Sequence
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


PSEUDO_FILE_SYSTEMS: Final = frozenset(
    {
        "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs",
        "devpts", "devtmpfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs",
        "proc", "pstore", "rpc_pipefs", "securityfs", "selinuxfs", "sysfs", "tracefs",
    }
)  # fmt: skip
"""Kernel file systems whose "files" are generated on read: sizes lie, reads may not end."""
_MOUNTINFO: Final = "/proc/self/mountinfo"

Check = Callable[[], None]
"""Called between units of work; raises to stop (the node's cancel)."""


def _never() -> None:
    return None


def pseudo_devices(mountinfo: str = _MOUNTINFO) -> dict[int, str]:
    """The device numbers (``st_dev``) of the mounted pseudo file systems, with their
    type; empty where there is no ``/proc`` (not Linux)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return {}
    found: dict[int, str] = {}
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 3:
            continue
        kind = line.split(" - ", 1)[1].split()[0]
        major, _, minor = fields[2].partition(":")
        if kind in PSEUDO_FILE_SYSTEMS and major.isdigit() and minor.isdigit():
            found[os.makedev(int(major), int(minor))] = kind
    return found


def refuse_path(path: str, allowed_roots: Sequence[str]) -> str | None:
    """Why *path* may not be audited under *allowed_roots* (resolved already), or
    ``None``. The path is resolved first (links and ``..``), so no spelling gets out."""
    if not allowed_roots:
        return (
            "this server audits no directory: the operator has allowed none "
            "(workflow_settings.repo_audit.allowed_roots)"
        )
    real = os.path.realpath(path)
    if not inside(real, allowed_roots):
        return (
            f"{path!r} is outside the directories this server may audit: "
            f"{', '.join(allowed_roots)} (the operator's workflow_settings.repo_audit"
            ".allowed_roots; unset, the working directory of a local process)"
        )
    try:
        found = os.stat(real)
    except FileNotFoundError:
        return f"{path!r} does not exist (relative paths start at {os.getcwd()})"
    except OSError as error:
        return f"{path!r} cannot be read: {error.strerror}"
    if not stat.S_ISDIR(found.st_mode):
        return f"{path!r} is not a directory"
    device = found.st_dev
    kind = pseudo_devices().get(device)
    if kind is not None:
        return f"{path!r} is on a kernel pseudo file system ({kind}), which is not audited"
    return None


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


@dataclass(frozen=True)
class Fence:
    """Where reads may go: the allowed roots (resolved) and the pseudo file systems."""

    roots: tuple[str, ...] | None
    """``None``: anywhere (no confinement); empty: nowhere."""
    pseudo: dict[int, str]

    @classmethod
    def of(cls, allowed_roots: Sequence[str] | None) -> "Fence":
        """The fence for *allowed_roots* and the file systems mounted now."""
        roots = None if allowed_roots is None else tuple(map(os.path.realpath, allowed_roots))
        return cls(roots, pseudo_devices())

    def admits(self, real_path: str) -> bool:
        """True if the resolved *real_path* is inside the roots (or there are none)."""
        return self.roots is None or inside(real_path, self.roots)


def list_tree(
    path: str,
    *,
    ignore: Sequence[str],
    follow_symlinks: bool,
    max_files: int,
    allowed_roots: Sequence[str] | None = None,
    check: Check = _never,
) -> Listing:
    """Every regular file under *path* that no pattern in *ignore* skips.

    *path* itself may be a symbolic link; links inside it are followed only with
    *follow_symlinks* (each directory is then entered once, so link loops end), and only
    where they lead inside *allowed_roots*. Directories on pseudo file systems are not
    entered. *check* is called before each directory is read.

    Raises:
        AuditPathError: *path* does not exist, is not a directory, is on a pseudo file
            system, or (its links resolved) is outside every one of *allowed_roots*
            (``None``: no confinement).
        TooManyFilesError: more than *max_files* files were found.
    """
    fence = Fence.of(allowed_roots)
    root = _root(path, fence)
    listing = Listing(root=root, files=[])
    root_stat = os.stat(root)
    seen = {(root_stat.st_dev, root_stat.st_ino)}
    pending = [""]
    while pending:
        check()
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
            kind = _kind(entry, follow_symlinks, seen, fence)
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


def _root(path: str, fence: Fence) -> str:
    root = os.path.realpath(path)
    if not fence.admits(root):
        raise AuditPathError(f"{path!r} leads outside the directories this server may audit")
    if not os.path.exists(root):
        raise AuditPathError(f"{path!r} does not exist")
    if not os.path.isdir(root):
        raise AuditPathError(f"{path!r} is not a directory")
    kind = fence.pseudo.get(os.stat(root).st_dev)
    if kind is not None:
        raise AuditPathError(f"{path!r} is on a kernel pseudo file system ({kind})")
    return root


def _kind(entry: os.DirEntry[str], follow: bool, seen: set[tuple[int, int]], fence: Fence) -> str:
    try:
        link = entry.is_symlink()
        if link and not (follow and fence.admits(os.path.realpath(entry.path))):
            return "symlink"
        if entry.is_dir(follow_symlinks=follow):
            info = entry.stat(follow_symlinks=follow)
            if info.st_dev in fence.pseudo:
                return "special"
            if follow:
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
    fence: Fence | None = None,
    check: Check = _never,
) -> FileStats:
    """Size, SHA-256, lines and markers of one file; a file that cannot be read is
    described (``unreadable`` or ``vanished``), never raised. A followed link must lead
    inside the *fence*'s roots; no more than *max_bytes* are read; *check* is called
    between reads.
    """
    fence = fence if fence is not None else Fence(None, {})
    stats = FileStats(path=relative, language=language_of(relative), status="read")
    flags = os.O_RDONLY | _NON_BLOCK | _NO_FOLLOW
    where = os.path.join(root, relative)
    if follow_symlinks:
        where = os.path.realpath(where)  # then opened without following, as it resolved
        if not fence.admits(where):
            stats.status, stats.error = "unreadable", "a link out of the allowed directories"
            return stats
    try:
        descriptor = os.open(where, flags)
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
        elif info.st_dev in fence.pseudo:
            stats.status = "unreadable"
            stats.error = f"on a kernel pseudo file system ({fence.pseudo[info.st_dev]})"
        elif info.st_size > max_bytes:
            stats.status = "too_large"
        else:
            try:
                _read(file, stats, markers, max_bytes, check)
            except OSError as error:
                stats.status, stats.error = "unreadable", error.strerror or str(error)
    return stats


def _read(
    file: io.FileIO, stats: FileStats, markers: Markers | None, max_bytes: int, check: Check
) -> None:
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    size = newlines = 0
    tail = b""
    while True:
        check()
        chunk = file.read(min(_CHUNK, max_bytes - size + 1))
        if not chunk:
            break
        if size == 0 and b"\0" in chunk[:BINARY_SNIFF_BYTES]:
            stats.binary = True
        size += len(chunk)
        if size > max_bytes:  # it grew since fstat: no more is read than allowed
            stats.size, stats.status, stats.binary = size, "too_large", False
            return
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
