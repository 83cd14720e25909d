"""Finding the project's configuration: ``taskloom.toml``, or ``[tool.taskloom]`` in
``pyproject.toml``, found from the current directory upwards (or named by
``TASKLOOM_CONFIG``). It gives the defaults of the flags; a flag or a ``TASKLOOM_*``
variable overrides it. Relative paths in it are relative to the file's folder, so every
command finds the same database and workflows from any subfolder. What it may say is in
:mod:`taskloom.commands.project_model` (imported only when a file is found).
"""

import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from taskloom.commands.base import CommandError

if TYPE_CHECKING:
    from taskloom.commands.project_model import Project

CONFIG_FILE: Final = "taskloom.toml"
PYPROJECT: Final = "pyproject.toml"


def find(start: Path) -> Path | None:
    """The nearest ``taskloom.toml``, or ``pyproject.toml`` with ``[tool.taskloom]``, in
    *start* or a folder above it."""
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file():
            return candidate
        pyproject = folder / PYPROJECT
        if pyproject.is_file() and _has_taskloom_table(pyproject):
            return pyproject
    return None


def _has_taskloom_table(pyproject: Path) -> bool:
    stat = pyproject.stat()
    return _pyproject_version_has_table(pyproject, stat.st_mtime_ns, stat.st_size)


@cache
def _pyproject_version_has_table(pyproject: Path, _mtime_ns: int, _size: int) -> bool:
    """Whether this version of *pyproject* has ``[tool.taskloom]`` (each flag's default
    asks: a large ``pyproject.toml`` is parsed once per version, not once per flag)."""
    return _taskloom_table(pyproject) is not None


def _read(path: Path) -> dict[str, Any]:
    import tomllib  # loaded once a project file is found, not without one (ADR 0071)

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"cannot read {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise CommandError(f"{path} is not valid TOML: {error}") from None


def _taskloom_table(pyproject: Path) -> dict[str, Any] | None:
    tool = _read(pyproject).get("tool", {})
    table = tool.get("taskloom") if isinstance(tool, dict) else None
    return table if isinstance(table, dict) else None


def load(path: Path) -> "Project":
    """The configuration in *path*.

    Raises:
        CommandError: unreadable, not TOML, or a key that is unknown or of the wrong type
            (the message names the file and the key).
    """
    from pydantic import ValidationError

    from taskloom.commands.project_model import Project, ProjectConfig

    table = _taskloom_table(path) if path.name == PYPROJECT else _read(path)
    try:
        return Project(path=path, config=ProjectConfig.model_validate(table or {}))
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise CommandError(f"{path}: {where}: {problem['msg']}") from None


@cache
def _load_version(path: Path, _mtime_ns: int, _size: int) -> "Project":
    return load(path)


def current() -> "Project | None":
    """The configuration of the current directory: the file ``TASKLOOM_CONFIG`` names, or
    the nearest one found (each version of a file is read once)."""
    named = os.environ.get("TASKLOOM_CONFIG")
    if named:
        path: Path | None = Path(named).expanduser().resolve()
        assert path is not None
        if not path.is_file():
            raise CommandError(f"TASKLOOM_CONFIG names {named}, which is not a file")
    else:
        path = find(Path.cwd())
    if path is None:
        return None
    stat = path.stat()
    return _load_version(path, stat.st_mtime_ns, stat.st_size)


def configured(name: str) -> Any:
    """The project's value for the flag *name*, or ``None``."""
    project = current()
    return project.value(name) if project is not None else None
