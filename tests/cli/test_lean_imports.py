"""Commands that need no server and no driver do not import one (issue 16, ADR 0022).

Each command runs in a fresh interpreter, which then reports the heavy modules it holds:
the MCP SDK and its HTTP stack, the PostgreSQL driver, jsonschema, and prometheus_client (ADR 0034).
"""

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

from taskloom.cli import main
from tests.helpers import checkout_env, initialize_line

HEAVY = (
    "mcp",
    "mcp_types",
    "uvicorn",
    "starlette",
    "httpx",
    "psycopg",
    "psycopg_pool",
    "jsonschema",
    "prometheus_client",
)
DRIVERS = ("aiosqlite", "sqlite3", "rich")
"""Not even the SQLite driver, nor rich, for ``--help``."""
PROBE = """
import json, sys
from taskloom.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
drivers = sorted(m for m in {drivers!r} if m in sys.modules)
print(json.dumps({{"code": code, "heavy": heavy, "drivers": drivers}}), file=sys.stderr)
"""


def _heavy_modules(*argv: str, cwd: Path) -> tuple[object, list[str]]:
    code, heavy, _ = _probe(*argv, cwd=cwd)
    return code, heavy


def _probe(*argv: str, cwd: Path) -> tuple[object, list[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY, drivers=DRIVERS), *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=checkout_env(),
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["heavy"], report["drivers"]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lean") / "lean.db"
    with pytest.raises(SystemExit):
        main(["db", "migrate", "--db", str(path)])
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["tasks", "list"],
        ["tasks", "list", "--json"],
        ["workflows", "list"],
        ["db", "check"],
    ],
    ids=" ".join,
)
def test_a_command_that_needs_no_server_imports_no_heavy_module(
    argv: list[str], database: Path
) -> None:
    db_flag = [] if argv == ["--help"] else ["--db", str(database)]
    if argv[0] == "workflows":
        db_flag = []
    code, heavy = _heavy_modules(*argv, *db_flag, cwd=database.parent)
    assert code == 0
    assert heavy == []


def test_serving_does_import_the_sdk(database: Path) -> None:
    """The probe sees what is there: ``serve`` on a closed stdin loads the SDK."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.format(heavy=HEAVY, drivers=DRIVERS),
            "serve",
            "--db",
            str(database),
        ],
        capture_output=True,
        text=True,
        input="",
        cwd=database.parent,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0
    assert "mcp" in report["heavy"]


@pytest.mark.parametrize("argv", [["--help"], ["tasks", "--help"], ["run", "--help"]], ids=" ".join)
def test_help_loads_no_database_driver(argv: list[str], tmp_path: Path) -> None:
    code, heavy, drivers = _probe(*argv, cwd=tmp_path)
    assert (code, heavy, drivers) == (0, [], [])


MODELS = (
    "pydantic",
    "taskloom.engine.models",
    "taskloom.config",
    "taskloom.server",
    "taskloom.engine.worker",
)


_RUN_THE_COMMAND = (
    "import json, sys\n"
    "from taskloom.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
)
"""A probe's start: the command of its arguments, run to its end in this process."""


@pytest.mark.parametrize(
    "argv", [["--help"], ["serve", "--help"], ["worker", "--help"]], ids=" ".join
)
def test_help_loads_no_engine_model(argv: list[str], tmp_path: Path) -> None:
    """``taskloom --help`` answers without the engine's pydantic models (issue 25, ADR
    0041: ``taskloom`` and ``taskloom.engine`` load their names on first use); the help
    of ``serve`` and ``worker`` states their defaults without the settings models that
    hold them (ADR 0044)."""
    probe = _RUN_THE_COMMAND + (
        f"found = [m for m in {MODELS!r} if m in sys.modules]\n"
        "print(json.dumps(found), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []


def test_the_public_names_still_load_on_first_use() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, taskloom\n"
                "assert 'taskloom.engine.models' not in sys.modules\n"
                "from taskloom import Workflow, TaskState, open_engine\n"
                "from taskloom.engine import TaskManager, TaskloomError\n"
                "print(Workflow.__module__, TaskState.__module__, TaskManager.__module__)\n"
            ),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "taskloom.engine.dag",
        "taskloom.engine.states",
        "taskloom.engine.manager",
    ]


STDIO_SERVE_LEAVES_OUT = (
    "taskloom.server.http",  # the HTTP transport: its settings, tokens, grants, OAuth
    "taskloom.server.dashboard",
    "taskloom.observability.metrics",
    "taskloom.persistence.postgres.store",
    "taskloom.commands.arguments",  # the other commands' flags, and their handlers:
    "taskloom.commands.run",
    "taskloom.commands.tasks_read",
    "taskloom.commands.tasks_change",
    "taskloom.commands.worker",
    "taskloom.commands.ui",
    "taskloom.commands.tokens",
    "taskloom.commands.render",
    "tomllib",  # no project file, no --settings @FILE.toml
    "anyio.to_process",  # ctx.run_in_process loads it with its first call
    "prometheus_client",
    "jwt",
    "jinja2",
    "psycopg",
    "psycopg_pool",
)
"""What a stdio ``serve`` does not use, with every module under each (ADR 0071)."""


def test_a_stdio_serve_answers_without_what_only_other_transports_and_commands_use(
    database: Path,
) -> None:
    """Issue 25: a stdio ``serve`` answers its first request in at most 1.1x the time of
    ``import mcp``; it imports neither the HTTP transport, nor PostgreSQL's store, the
    dashboard, metrics, the other commands, nor ``tomllib`` without a project file
    (``database.parent`` has none). The probe reports what it held when it stopped:
    after its answer to ``initialize``, once its stdin closed."""
    probe = _RUN_THE_COMMAND + (
        f"leaves = {STDIO_SERVE_LEAVES_OUT!r}\n"
        "found = sorted(\n"
        "    m for m in sys.modules if any(m == l or m.startswith(l + '.') for l in leaves)\n"
        ")\n"
        "print(json.dumps({'served': 'taskloom.server.app' in sys.modules, 'found': found}),"
        " file=sys.stderr)\n"
    )
    argv = [sys.executable, "-c", probe, "serve", "--db", str(database)]
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=database.parent,
        env=checkout_env(),
    ) as server:
        assert server.stdin is not None
        assert server.stdout is not None
        assert server.stderr is not None
        try:
            server.stdin.write(initialize_line("lean"))
            server.stdin.flush()
            ready, _, _ = select.select([server.stdout], [], [], 50)
            assert ready, "no answer to initialize within 50 s"
            answer = json.loads(server.stdout.readline())
            _, err = server.communicate(timeout=50)  # closes stdin: the server stops
        finally:  # a server that did not stop is killed: Popen's exit waits unbounded
            if server.poll() is None:
                server.kill()
        assert server.returncode == 0, err
    assert answer["id"] == 1
    assert "result" in answer
    report = json.loads(err.strip().splitlines()[-1])
    assert report == {"served": True, "found": []}
