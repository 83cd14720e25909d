"""The dependency rules of docs/adr/0002, checked rather than hoped for."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import checkout_env

SOURCE = Path(__file__).resolve().parents[2] / "src" / "taskloom"


def _imported_modules(package: Path) -> dict[str, set[str]]:
    """Every absolute module each file of *package* imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        found[str(path.relative_to(package))] = names
    return found


def _allowed_in_engine(file: str, name: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names or top in {"pydantic", "anyio"}:
        return True
    if top == "tenacity":  # its wait strategies compute node backoff, nothing else
        return file == "retry.py"
    return name == "taskloom.engine" or name.startswith("taskloom.engine.")


def test_the_engine_imports_only_the_standard_library_pydantic_anyio_and_itself() -> None:
    offenders = {
        f"{file}: {name}"
        for file, names in _imported_modules(SOURCE / "engine").items()
        for name in names
        if not _allowed_in_engine(file, name)
    }
    assert not offenders


@pytest.mark.parametrize("driver", ["sqlite3", "aiosqlite", "asyncpg", "psycopg"])
def test_only_persistence_touches_database_drivers(driver: str) -> None:
    offenders = {
        file
        for file, names in _imported_modules(SOURCE).items()
        if not file.startswith("persistence/")
        and any(name == driver or name.startswith(driver + ".") for name in names)
    }
    assert not offenders


def test_the_import_linter_contracts_are_kept() -> None:
    linter = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(linter), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=SOURCE.parents[1],
        env=checkout_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_workflows_import_only_the_public_dag_api() -> None:
    public = {"taskloom.engine.dag", "taskloom.engine.retry"}
    offenders = {
        f"{file}: {name}"
        for file, names in _imported_modules(SOURCE / "workflows").items()
        for name in names
        if not (
            name.split(".")[0] in sys.stdlib_module_names
            or name.split(".")[0] in {"pydantic", "anyio"}
            or name in public
            or name.startswith("taskloom.workflows.")  # helpers shared by the built-ins
        )
    }
    assert not offenders


def _part(name: str) -> str:
    """The root entry of the package that module *name* (``taskloom.x.y``) is in."""
    return name.removeprefix("taskloom.").split(".")[0]


def import_graph(package: Path = SOURCE) -> dict[str, set[str]]:
    """Which root entries of the package (sub-packages and root modules) import which."""
    graph: dict[str, set[str]] = {}
    for file, names in _imported_modules(package).items():
        source = file.removesuffix(".py").split("/")[0]
        targets = graph.setdefault(source, set())
        targets.update(
            _part(name) for name in names if name.startswith("taskloom.") and _part(name) != source
        )
    return graph


def draw(graph: dict[str, set[str]]) -> str:
    """*graph* as text: each root entry, then what it imports."""
    width = max(len(source) for source in graph)
    return "\n".join(
        f"{source:<{width}} -> {', '.join(sorted(graph[source])) or '-'}"
        for source in sorted(graph)
    )


def test_the_root_holds_the_product_and_no_layer_imports_the_command_line() -> None:
    """ADR 0044: the demo, its client and the docs generator are not in the package; the
    command line is ``cli`` and ``commands``, and nothing below imports them."""
    graph = import_graph()
    assert not {"demo", "demo_client", "docs_config", "cli_http"} & set(graph)
    front = {"cli", "commands", "__main__"}
    assert [source for source in graph if graph[source] & front and source not in front] == []


if __name__ == "__main__":  # python -m tests.unit.test_architecture [SRC/taskloom]
    print(draw(import_graph(Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE)))
