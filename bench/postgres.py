"""taskloom on one PostgreSQL: worker processes, claim latency, and MCP figures.

- node completions per second with 1, 2 and 4 worker processes on one database (the
  scaling curve): the workers are up and listening, then 50 runs of the 20-node ``wide``
  workflow are submitted from another process; timed from the first submit until every
  run has ended;
- the server's own floor: one-row INSERT commits per second from 1 and 4 connections
  (no taskloom), to read the curve against;
- claim latency: from ``submit`` in one process to the node starting in a worker of
  another (woken by LISTEN/NOTIFY), p50/p99;
- the MCP figures of ``mcp_stdio`` (creations/s sequential and 16 in flight, ``tasks/get``,
  call to completed) for ``taskloom serve --db postgresql://...``, next to taskloom on
  SQLite measured in the same run.

Every measurement gets a database of its own (``taskloom_bench_<random>``), dropped
afterwards. The server comes from ``TASKLOOM_TEST_POSTGRES_URL`` (default: the local one).

    python bench/postgres.py worker URL SCHEMA   # a worker process (prints "ready")
"""

import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import anyio
import psycopg
from psycopg import sql

import figures
import pg_flows
from mcp_client import MODERN, ServerSpec
from mcp_stdio import TASKLOOM, Samples, Sizes, Target, measure_round, taskloom_spec
from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.postgres import PostgresSettings

BENCH: Final = Path(__file__).resolve().parent
SERVER: Final = os.environ.get(
    "TASKLOOM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SCHEMA: Final = "bench"
WAIT_S: Final = 120.0
Row = figures.Row
TASKLOOM_PG: Final = "taskloom on PostgreSQL"


def unreachable() -> str | None:
    """Why the benchmarks' PostgreSQL server (``SERVER``) cannot be used; ``None`` when it
    answers."""
    try:
        with psycopg.connect(SERVER, connect_timeout=5):
            return None
    except psycopg.OperationalError as error:
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def vacuum_analyze(url: str, *tables: str) -> None:
    """What autovacuum does to freshly filled *tables* soon after that many inserts (it is
    off on the test server): without it the planner knows nothing of the new rows."""
    with psycopg.connect(url, autocommit=True) as connection:
        for table in tables:
            connection.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(SCHEMA, table)))


def with_postgres(bench: str, rows: list[Row], on_postgres: Callable[[], list[Row]]) -> list[Row]:
    """*rows* (measured on SQLite), then *on_postgres*'s when the server answers; when it
    does not, the last row's note says why PostgreSQL was skipped."""
    down = unreachable()
    if down is None:
        return rows + on_postgres()
    print(f"{bench}: PostgreSQL skipped: {down}", file=sys.stderr)
    rows[-1]["note"] = f"PostgreSQL skipped (unreachable: {down})"
    return rows


@dataclass(frozen=True)
class PgSizes:
    runs: int
    workers: tuple[int, ...]
    repeats: int
    claims: int
    commits: int
    mcp: Sizes


QUICK: Final = PgSizes(4, (1, 2), 1, 5, 40, Sizes(1, 10, 16, 10, 2, 1, 0, 0, 0.05))
FULL: Final = PgSizes(50, (1, 2, 4), 3, 50, 2000, Sizes(3, 200, 480, 500, 30, 10, 0, 0, 0.3))


@contextmanager
def scratch_database() -> Iterator[str]:
    """The URL of a new, empty database on the server, dropped (with its sessions) after."""
    name = f"taskloom_bench_{secrets.token_hex(6)}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlsplit(SERVER)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def settings(url: str, *, run_worker: bool) -> TaskloomSettings:
    """How every process of this bench opens the engine."""
    return TaskloomSettings(
        database=PostgresSettings(url=url, schema_name=SCHEMA, max_connections=6),
        workflow_modules=("pg_flows",),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
    )


async def migrate(url: str) -> None:
    """Create the schema on *url* (an engine opened and closed)."""
    async with open_engine(settings(url, run_worker=False)):
        pass


@contextmanager
def workers(url: str, count: int) -> Iterator[None]:
    """*count* worker processes on *url*, each listening and working; stopped after."""
    with ExitStack() as stack:
        started = []
        for _ in range(count):
            child = subprocess.Popen(
                [sys.executable, str(Path(__file__)), "worker", url],
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(_stop, child)
            started.append(child)
        for child in started:
            line = child.stdout.readline() if child.stdout else ""
            if line.strip() != "ready":
                raise RuntimeError(f"a worker process did not start (it said {line!r})")
        yield


def _stop(child: subprocess.Popen[str]) -> None:
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


async def _submit_all(url: str, runs: int) -> float:
    """Seconds from the first submit of *runs* ``wide`` runs until every one has ended."""
    async with open_engine(settings(url, run_worker=False)) as engine:
        started = time.perf_counter()
        tasks = [await submit(engine.manager, pg_flows.wide) for _ in range(runs)]
        with anyio.fail_after(WAIT_S):
            for task in tasks:
                done = await engine.manager.wait_until_terminal(task.id)
                if done.state is not TaskState.COMPLETED:
                    raise RuntimeError(f"a run ended {done.state.value}: {done.error}")
        return time.perf_counter() - started


def scaling(sizes: PgSizes) -> list[Row]:
    """Node completions per second by worker process count, and the ratio to one process."""
    nodes = sizes.runs * len(pg_flows.wide.nodes)
    rates: dict[int, list[float]] = defaultdict(list)
    for _ in range(sizes.repeats):
        for count in sizes.workers:  # interleaved: each count sees the same load
            with scratch_database() as url:
                anyio.run(migrate, url)
                with workers(url, count):
                    rates[count].append(nodes / anyio.run(_submit_all, url, sizes.runs))
    one = statistics.median(rates[1])
    found = []
    for count, values in rates.items():
        row = figures.row(f"node completions/s, {count} worker process(es)", values, "/s")
        row["note"] = f"{sizes.runs} runs x {len(pg_flows.wide.nodes)} nodes; "
        row["note"] += f"{statistics.median(values) / one:.2f}x one process"
        found.append(row)
    return found


async def _claims(url: str, samples: int) -> list[float]:
    async with open_engine(settings(url, run_worker=False)) as engine:
        found = []
        for _ in range(samples):
            submitted = time.time()
            task = await submit(engine.manager, pg_flows.stamp)
            with anyio.fail_after(WAIT_S):
                done = await engine.manager.wait_until_terminal(task.id)
            if not isinstance(done.result, float):  # the one node's output: when it started
                raise TypeError(f"the probe ended {done.state.value}: {done.result!r}")
            found.append((done.result - submitted) * 1000)
        return found


def claim_latency(sizes: PgSizes) -> list[Row]:
    """Milliseconds from submit to the node starting in another process."""
    with scratch_database() as url:
        anyio.run(migrate, url)
        with workers(url, 1):
            values = anyio.run(_claims, url, sizes.claims)
    return [figures.latency("claim: submit to node started in another process", values)]


def _commit_loop(url: str, count: int) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        for index in range(count):
            connection.execute("INSERT INTO probe VALUES (%s)", (index,))


def commit_floor(sizes: PgSizes) -> list[Row]:
    """The server's own pace: one-row INSERT commits per second from 1 and 4 connections."""
    found = []
    with scratch_database() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("CREATE TABLE probe (x int)")
        for connections in (1, 4):
            rates = []
            for _ in range(sizes.repeats):
                each = sizes.commits // connections
                threads = [
                    threading.Thread(target=_commit_loop, args=(url, each))
                    for _ in range(connections)
                ]
                started = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                rates.append(each * connections / (time.perf_counter() - started))
            row = figures.row(
                f"floor: one-row INSERT commits/s, {connections} connection(s)", rates, "/s"
            )
            row["note"] = "psycopg, autocommit, no taskloom"
            found.append(row)
    return found


def _pg_spec(url: str) -> Callable[[Path], ServerSpec]:
    def spec(folder: Path) -> ServerSpec:
        command = [sys.executable, "-m", "taskloom", "serve", "--db", url]
        return ServerSpec(
            TASKLOOM_PG,
            [*command, "--workflows", "flows"],
            {"PYTHONPATH": f"{BENCH.parent / 'src'}:{BENCH}"},  # this checkout's src first
        )

    return spec


def mcp(sizes: PgSizes) -> list[Row]:
    """The MCP figures of taskloom on PostgreSQL, with taskloom on SQLite beside them."""
    samples: Samples = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        for number in range(sizes.mcp.rounds):
            sqlite_state = base / f"sqlite{number}"
            sqlite_state.mkdir()
            sqlite = Target(TASKLOOM, MODERN, taskloom_spec)
            anyio.run(measure_round, sqlite, sizes.mcp, sqlite_state, samples)
            with scratch_database() as url:
                pg_state = base / f"pg{number}"
                pg_state.mkdir()
                target = Target(TASKLOOM_PG, MODERN, _pg_spec(url))
                anyio.run(measure_round, target, sizes.mcp, pg_state, samples)
        log = (base / "stderr.log").read_text() if (base / "stderr.log").exists() else ""
    if "Traceback" in log:
        raise RuntimeError(f"a server wrote a traceback:\n{log[-3000:]}")
    return _mcp_rows(samples)


def _mcp_rows(samples: Samples) -> list[Row]:
    sqlite, pg = samples[f"{TASKLOOM} {MODERN}"], samples[f"{TASKLOOM_PG} {MODERN}"]
    found = []
    for measure, title in (
        ("sequential", "creations/s, sequential"),
        ("concurrent", "creations/s, 16 in flight"),
    ):
        for name, values in (("SQLite", sqlite[measure]), ("PostgreSQL", pg[measure])):
            found.append(figures.row(f"{title}: taskloom on {name} {MODERN}", values, "/s"))
        ratio = statistics.median(a / b for a, b in zip(pg[measure], sqlite[measure], strict=True))
        found[-1]["note"] = f"{ratio:.2f}x SQLite"
    for measure, title in (("get", "tasks/get p50"), ("completed", "call to completed p50")):
        for name, rounds in (("SQLite", sqlite[measure]), ("PostgreSQL", pg[measure])):
            found.append(figures.latency(f"{title}: taskloom on {name} {MODERN}", _pooled(rounds)))
        ratio = figures.p50(_pooled(pg[measure])) / figures.p50(_pooled(sqlite[measure]))
        found[-1]["note"] += f"; {ratio:.2f}x SQLite"
    return found


def _pooled(rounds: list[list[float]]) -> list[float]:
    return [value for values in rounds for value in values]


def run(quick: bool) -> list[Row]:
    """Every PostgreSQL benchmark."""
    sizes = QUICK if quick else FULL
    return scaling(sizes) + commit_floor(sizes) + claim_latency(sizes) + mcp(sizes)


async def _work(url: str) -> None:
    frozen = settings(url, run_worker=True).model_copy(update={"freeze_start_up": True})
    async with open_engine(frozen):  # it stands for `taskloom worker`, which freezes
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["worker", url]:
            anyio.run(_work, url)
        case _:
            for result in run(quick="--quick" in sys.argv):
                print(result)
