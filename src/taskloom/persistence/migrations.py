"""Numbered SQL migrations, shared by the stores: ``NNNN_name.sql`` files in a package."""

import re
from functools import cache
from importlib import resources
from typing import Final

_MIGRATION_NAME: Final = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@cache
def numbered_migrations(package: str) -> tuple[tuple[int, str], ...]:
    """Every migration in *package*'s ``migrations`` folder as ``(number, sql)``.

    Raises:
        RuntimeError: the files are not numbered 1, 2, 3... without gaps (a packaging bug).
    """
    folder = resources.files(package) / "migrations"
    found: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    numbers = [number for number, _ in found]
    if numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..N without gaps, found {numbers}")
    return tuple(found)
