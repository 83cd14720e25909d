"""Deploys that lose no run (ADR 0039), over real worker processes: runs stay on the
version they started with across a restart that adds a version; a process without a
run's version leaves it waiting; on PostgreSQL, workers of different versions share one
database through a rolling deploy and a kill -9 of either."""

import contextlib
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from taskloom.bootstrap import open_engine
from taskloom.cli import main
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from tests import postgres
from tests.helpers import eventually, helper_process
from tests.integration.version_flows import source
from tests.integration.version_worker import registry, settings

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def worker(db: str, versions: str, schema: str | None = None) -> AsyncIterator[Process]:
    """A worker process with these versions of vflow, once it says it is ready (read
    without blocking the loop, bounded); stopped by SIGTERM at the end unless the test
    killed it, which it takes as ``taskloom worker`` does (a clean stop: exit status 0);
    its stderr holds no traceback."""
    argv = [sys.executable, "-m", "tests.integration.version_worker", db, versions]
    async with helper_process([*argv, *([schema] if schema else [])], cwd=ROOT) as child:
        yield child.process
    assert "Traceback" not in child.errors, child.errors


@asynccontextmanager
async def client(db: str, versions: str, schema: str | None = None) -> AsyncIterator[TaskManager]:
    """A manager on the database (no worker), whose new calls get the newest of *versions*."""
    async with open_engine(
        settings(db, schema, run_worker=False), workflows=registry(versions)
    ) as engine:
        yield engine.manager


async def _new(manager: TaskManager, versions: str, **arguments: Any) -> Task:
    return await submit(manager, registry(versions)["vflow"], arguments)


async def _when(manager: TaskManager, task: Task, *states: TaskState, within_s: float = 30) -> Task:
    """*task* once it is in one of *states*: a state it stays in until the test moves on
    (a wait for a passing one can start too late). The bounds are far above what is
    waited for, measured at load 10 on two cores: a live worker's claim (woken by
    NOTIFY, or its 0.1 s poll) and a node's transaction took at most 0.1 s; the runs of
    a killed worker end after their lease (LEASE_S, 1.5 s) and a claim: at most 1.6 s."""
    found: list[Task] = []

    async def reached() -> bool:
        found[:] = [await manager.get(task.id)]
        return found[0].state in states

    await eventually(reached, within_s=within_s, every_s=0.05)
    return found[0]


async def _answer(manager: TaskManager, task: Task) -> None:
    waiting = await _when(manager, task, TaskState.INPUT_REQUIRED)
    (key,) = waiting.input_requests
    await manager.provide_input(task.id, key, {"go": True})


async def _cli(*argv: str) -> tuple[int, str, str]:
    """``taskloom ARGV`` as a process of its own: exit code, stdout, stderr."""
    done = await anyio.run_process([sys.executable, "-m", "taskloom", *argv], cwd=ROOT, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _by(version: str) -> str:
    return f"started by {version}, worked by {version}, finished by {version}"


async def test_an_sqlite_deploy_keeps_old_runs_on_the_old_code(tmp_path: Path) -> None:
    """Stop the process, start it with both versions: every old run completes on the
    old code, new calls run the new."""
    db = str(tmp_path / "deploy.db")
    async with client(db, "1") as manager:
        async with worker(db, "1"):
            old = [await _new(manager, "1", n=n, ask=True) for n in range(3)]
            for task in old:
                await _when(manager, task, TaskState.INPUT_REQUIRED)
        # deployed: version 2 beside version 1
        async with worker(db, "1,2"):
            new = await _new(manager, "1,2", ask=True)
            assert new.workflow_version == "2"
            for task in [*old, new]:
                await _answer(manager, task)
            for task in old:
                assert (await _when(manager, task, TaskState.COMPLETED)).result == _by("1")
            assert (await _when(manager, new, TaskState.COMPLETED)).result == _by("2")


async def test_a_process_without_the_version_leaves_old_runs_waiting(tmp_path: Path) -> None:
    """Only version 2 deployed: version 1's runs wait (none fails) and say so; when a
    process with version 1 is back they complete on it."""
    db = str(tmp_path / "only-new.db")
    async with client(db, "1") as manager:
        old = [await _new(manager, "1", n=n) for n in range(3)]
        async with worker(db, "2"):
            newer = await _new(manager, "2")
            assert (await _when(manager, newer, TaskState.COMPLETED)).result == _by("2")
            for task in old:
                assert (await manager.get(task.id)).state is TaskState.QUEUED
            says = "waiting for a process that has vflow version 1"

            async def marked() -> bool:  # the worker's pass beside its first claims
                messages = [(await manager.get(task.id)).status_message for task in old]
                return messages == [says] * len(old)

            await eventually(marked, within_s=10)
            _, listed, _ = await _cli("tasks", "list", "--db", db, "--state", "queued")
            assert listed.count("waiting for a process that has vflow version 1") == 3
            assert "3 runs wait for a process that has vflow version 1" in listed
        async with worker(db, "1"):
            for task in old:
                assert (await _when(manager, task, TaskState.COMPLETED)).result == _by("1")


def _stored(db: Path) -> list[str]:
    """Everything an SQLite database holds, as SQL (to compare before and after)."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return list(connection.iterdump())


async def test_bad_input_to_upgrade_and_a_workflow_gone_everywhere(tmp_path: Path) -> None:
    """An unknown version given to ``upgrade``, and a run whose workflow no process has:
    one clear line each, nothing stored changes."""
    db = tmp_path / "bad.db"
    (tmp_path / "vflow_old.py").write_text(source("1"))
    (tmp_path / "vflow_new.py").write_text(source("2"))
    both = ["--workflows", str(tmp_path / "vflow_old.py"), "--workflows"]
    both.append(str(tmp_path / "vflow_new.py"))
    async with client(str(db), "1") as manager:
        task = await _new(manager, "1")
    stored = _stored(db)
    assert task.id in "".join(stored)
    unknown = (
        "taskloom: error: vflow version 9 is not loaded (loaded versions: 1, 2); "
        "load it with --workflows MODULE|FILE.py\n"
    )
    for runs in ([task.id], ["--all-of", "vflow@1"]):
        assert await _cli("tasks", "upgrade", *runs, "--to", "9", "--db", str(db), *both) == (
            2,
            "",
            unknown,
        )
    # vflow is gone from every process: nothing can move it, and it waits, saying so
    for runs, line in (
        ([task.id], "vflow version 2 is not loaded (loaded versions: none); load it with"),
        (["--all-of", "vflow@1"], "--all-of vflow@1: no workflow 'vflow' is loaded"),
    ):
        code, out, err = await _cli("tasks", "upgrade", *runs, "--to", "2", "--db", str(db))
        assert (code, out) == (2, "")
        assert err.startswith(f"taskloom: error: {line}"), err
        assert err.count("\n") == 1, err
    code, shown, _ = await _cli("tasks", "show", task.id, "--db", str(db))
    assert code == 0
    assert "waiting for a process that has vflow version 1 (for " in shown
    code, listed, _ = await _cli("tasks", "list", "--db", str(db))
    assert code == 0
    assert "1 run waits for a process that has vflow version 1" in listed
    assert _stored(db) == stored


async def test_a_rolling_deploy_on_postgresql_loses_nothing(tmp_path: Path) -> None:
    """Two workers of different versions on one database: the old one (version 1)
    and the new one (versions 1 and 2), each claiming only what it has; a kill -9 of
    each in turn in the middle of its runs; every run completes on its own version.

    The runs' middle nodes end only once the worker was killed (a file the test then
    creates), not after a while: on a loaded machine a second of work could be over
    before the test saw it running (a wait for a state already gone: a timeout), or
    before the kill meant to land in its middle."""
    postgres.require_server()
    schema = postgres.new_schema_name()
    url = postgres.TEST_URL
    old_killed, new_killed = str(tmp_path / "old-killed"), str(tmp_path / "new-killed")
    try:
        async with client(url, "1", schema) as old_calls, client(url, "1,2", schema) as new_calls:
            async with worker(url, "1", schema) as old_worker:
                old = [await _new(old_calls, "1", n=n, until=old_killed) for n in range(4)]
                await _all(old_calls, old, TaskState.RUNNING)
                async with worker(url, "1,2", schema) as new_worker:
                    new = [await _new(new_calls, "1,2", n=n, until=old_killed) for n in range(4)]
                    await _all(new_calls, new, TaskState.RUNNING)
                    await _kill(old_worker)  # kill -9 of the old worker mid-run
                    await anyio.Path(old_killed).touch()  # its runs, now the new one's, can end
                    more = [await _new(new_calls, "1,2", n=n) for n in range(2)]
                    for task in old:
                        done = await _when(old_calls, task, TaskState.COMPLETED, within_s=60)
                        assert done.result == _by("1")
                    for task in [*new, *more]:
                        done = await _when(new_calls, task, TaskState.COMPLETED, within_s=60)
                        assert done.result == _by("2")
                    late = [await _new(new_calls, "1,2", n=n, until=new_killed) for n in range(2)]
                    await _all(new_calls, late, TaskState.RUNNING)
                    await _kill(new_worker)  # and kill -9 of the new one, while it runs them
                    await anyio.Path(new_killed).touch()
                async with worker(url, "1,2", schema):
                    for task in late:
                        done = await _when(new_calls, task, TaskState.COMPLETED, within_s=60)
                        assert done.result == _by("2")
            failed = await new_calls.count(states=[TaskState.FAILED])
            assert failed == 0
    finally:
        postgres.drop_schema_now(schema)


async def _all(manager: TaskManager, tasks: list[Task], state: TaskState) -> None:
    for task in tasks:
        await _when(manager, task, state)


async def _kill(process: Process) -> None:
    """kill -9, returning once the process is gone: none of its runs moves after."""
    process.kill()
    with anyio.fail_after(10):
        await process.wait()


def test_two_modules_defining_one_version_differently_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        "from pydantic import BaseModel\nfrom taskloom import NodeContext, Workflow\n"
        "class In(BaseModel):\n    n: int = 0\n"
        "flow = Workflow('vflow', version='1', input=In)\n"
        "@flow.node()\nasync def only(ctx: NodeContext[In]) -> int:\n    return {value}\n"
    )
    (tmp_path / "vflow_a.py").write_text(source.format(value=1))
    (tmp_path / "vflow_b.py").write_text(source.format(value=2))
    db = tmp_path / "refused.db"
    flags = ["--workflows", str(tmp_path / "vflow_a.py"), "--workflows"]
    with pytest.raises(SystemExit) as refused:
        main(["workflows", "list", "--db", str(db), *flags, str(tmp_path / "vflow_b.py")])
    assert refused.value.code == 2
    differently = (
        "taskloom: error: two modules define vflow version 1 differently: give the changed "
        "one a new version\n"
    )
    assert capsys.readouterr().err == differently
    assert not db.exists()
    # and on a database with a run: `run` refuses before it writes anything
    with pytest.raises(SystemExit) as ran:
        main(["run", "countdown", "--input", '{"start": 1, "tick_s": 0}', "--db", str(db)])
    assert ran.value.code == 0
    capsys.readouterr()
    stored = _stored(db)
    with pytest.raises(SystemExit) as refused:
        main(["run", "vflow", "--db", str(db), *flags, str(tmp_path / "vflow_b.py")])
    assert refused.value.code == 2
    assert capsys.readouterr().err == differently
    assert _stored(db) == stored
