"""Operator settings reach the built-ins through the composition root, on a real database."""

import sys
from pathlib import Path

import anyio

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.workflows.audit_report import RepoAuditResult
from taskloom.workflows.command_matrix import MatrixResult


async def test_settings_configure_the_builtins_of_an_open_engine(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.py").write_text("# TODO\n")
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "taskloom.db"),
        worker=WorkerSettings(poll_s=0.05, input_recheck_s=None),
        load_entry_points=False,
        run_sweeper=False,
        workflow_settings={
            "repo_audit": {
                "reports_dir": str(tmp_path / "reports"),
                "allowed_roots": [str(tmp_path)],
            },
            "command_matrix": {"allowed_programs": [sys.executable]},
        },
    )
    async with open_engine(settings) as engine:
        audit = await submit(
            engine.manager, engine.workflows["repo_audit"], {"path": str(tmp_path / "tree")}
        )
        matrix = await submit(
            engine.manager,
            engine.workflows["command_matrix"],
            {"commands": [{"argv": [sys.executable, "-c", "print('ok')"]}]},
        )
        with anyio.fail_after(20):
            audited = await engine.manager.wait_until_terminal(audit.id)
            checked = await engine.manager.wait_until_terminal(matrix.id)
    assert audited.state is TaskState.COMPLETED, audited.error
    report = RepoAuditResult.model_validate(audited.result)
    assert report.report_json == str(tmp_path / "reports" / audit.id / "report.json")
    assert (tmp_path / "reports" / audit.id / "report.md").is_file()
    assert checked.state is TaskState.COMPLETED, checked.error
    assert MatrixResult.model_validate(checked.result).commands[0].stdout_tail == "ok"
