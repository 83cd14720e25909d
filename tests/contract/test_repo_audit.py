"""The built-in `repo_audit` on a real Worker over every store, on trees made in tmp_path."""

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import InvalidRequestError
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.validation import JsonSchemaValidator
from taskloom.workflows.audit_report import LanguageStats, RepoAuditResult
from taskloom.workflows.repo_audit import repo_audit
from tests.contract.harness import finish, running

PY = "import os\n# TODO: one\n# TODO and FIXME, not TODOs\n"
JS = "let x = 1;\n" * 10
MD = "hello\nworld"  # no final newline: still two lines
BINARY = b"\x00\x01\x02TODO" * 100


@pytest.fixture
def manager(store: TaskStore) -> TaskManager:
    return TaskManager(store, validator=JsonSchemaValidator())


@pytest.fixture
def audit(tmp_path: Path) -> Workflow[Any]:
    """repo_audit allowed to read tmp_path (unset, it reads the working directory)."""
    return repo_audit.configure({"allowed_roots": [str(tmp_path)]})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text(PY)
    (root / "sub" / "c.js").write_text(JS)
    (root / "README.md").write_text(MD)
    (root / "data.bin").write_bytes(BINARY)
    (root / "sub" / "big.txt").write_text("y" * 5000)
    for ignored in (".git", "node_modules", ".venv", "sub/__pycache__"):
        (root / ignored).mkdir()
        (root / ignored / "x.py").write_text("# TODO ignored\n")
    (root / "link.py").symlink_to(root / "a.py")
    (root / "outside").symlink_to(tmp_path, target_is_directory=True)
    return root.resolve()


async def test_an_audit_counts_hashes_and_reports(
    manager: TaskManager, store: TaskStore, tree: Path, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    flow = repo_audit.configure({"reports_dir": str(reports), "allowed_roots": [str(tmp_path)]})
    async with running(manager, store, flow):
        task = await submit(manager, flow, {"path": str(tree), "max_file_bytes": 1000})
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    result = RepoAuditResult.model_validate(done.result)
    assert result.root == str(tree)
    assert (result.files, result.lines) == (5, 3 + 10 + 2)
    assert result.bytes == len(PY) + len(JS) + len(MD) + len(BINARY) + 5000
    assert (result.binary_files, result.too_large, result.problems) == (1, 1, 0)
    assert (result.ignored, result.symlinks_skipped) == (4, 2)
    assert result.markers == {"TODO": 2, "FIXME": 1}  # not in binary or ignored files
    languages = {row.language: row for row in result.languages}
    assert set(languages) == {"Python", "JavaScript", "Markdown", "Binary", "Text"}
    assert languages["JavaScript"] == LanguageStats(
        language="JavaScript", files=1, bytes=len(JS), lines=10
    )
    assert [large.path for large in result.largest][:2] == ["sub/big.txt", "data.bin"]

    folder = reports / done.id
    assert result.report_json == str(folder / "report.json")
    assert result.report_markdown == str(folder / "report.md")
    document = json.loads((folder / "report.json").read_text())
    assert document["summary"] == done.result
    by_path = {record["path"]: record for record in document["files"]}
    assert sorted(by_path) == ["README.md", "a.py", "data.bin", "sub/big.txt", "sub/c.js"]
    for path in ("a.py", "README.md", "data.bin", "sub/c.js"):
        assert by_path[path]["sha256"] == hashlib.sha256((tree / path).read_bytes()).hexdigest()
    assert by_path["data.bin"] | {"sha256": None} == {
        "path": "data.bin",
        "language": "Binary",
        "status": "read",
        "size": len(BINARY),
        "sha256": None,
        "binary": True,
        "lines": None,
        "markers": {},
        "error": None,
    }
    assert by_path["sub/big.txt"]["status"] == "too_large"
    assert by_path["sub/big.txt"]["sha256"] is None
    markdown = (folder / "report.md").read_text()
    assert markdown.startswith(f"# Audit of `{tree}`")
    assert "| JavaScript | 1 | 110 | 10 |" in markdown
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


async def test_following_symlinks_reads_through_them_once(
    manager: TaskManager, store: TaskStore, tree: Path, tmp_path: Path
) -> None:
    (tree / "outside").unlink()
    (tree / "loop").symlink_to(tree, target_is_directory=True)
    flow = repo_audit.configure(
        {"reports_dir": str(tmp_path / "reports"), "allowed_roots": [str(tmp_path)]}
    )
    async with running(manager, store, flow):
        task = await submit(manager, flow, {"path": str(tree), "follow_symlinks": True})
        done = await finish(manager, task)
    assert done.state is TaskState.COMPLETED, done.error
    result = RepoAuditResult.model_validate(done.result)
    assert result.files == 6  # link.py counts; the loop back to the root does not
    assert result.symlinks_skipped == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "does not exist"),
        (lambda root: root / "a.py", "is not a directory"),
    ],
)
async def test_a_path_that_is_not_a_directory_is_refused_before_a_task_exists(
    manager: TaskManager,
    store: TaskStore,
    tree: Path,
    audit: Workflow[Any],
    make: Callable[[Path], Path],
    message: str,
) -> None:
    """Issue 26: not a failed task that suggests a resume which would fail again."""
    with pytest.raises(InvalidRequestError, match=message):
        await submit(manager, audit, {"path": str(make(tree)), "write_report": False})
    assert (await manager.list()).tasks == ()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "missing", "does not exist"),
        (lambda root: root / "a.py", "is not a directory"),
    ],
)
async def test_a_path_gone_by_the_time_the_task_runs_fails_it_clearly(
    manager: TaskManager,
    store: TaskStore,
    tree: Path,
    audit: Workflow[Any],
    make: Callable[[Path], Path],
    message: str,
) -> None:
    target = make(tree)
    if message == "does not exist":
        target.mkdir()
    else:
        target.rename(tree / "a.py.kept")
        target.mkdir()
    task = await submit(manager, audit, {"path": str(target), "write_report": False})
    target.rmdir()
    if message == "is not a directory":
        (tree / "a.py.kept").rename(target)
    async with running(manager, store, audit):
        done = await finish(manager, task)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "invalid_input"  # its input is checked again as it starts
    assert message in done.error.message


async def test_too_many_files_fail_with_advice(
    manager: TaskManager, store: TaskStore, tree: Path, audit: Workflow[Any]
) -> None:
    async with running(manager, store, audit):
        task = await submit(manager, audit, {"path": str(tree), "max_files": 2})
        done = await finish(manager, task)
    assert done.error is not None
    assert "more than 2 files; raise max_files or add ignore patterns" in done.error.message


async def test_bad_arguments_and_paths_outside_the_allowed_roots_are_refused_at_submit(
    manager: TaskManager, tree: Path, tmp_path: Path
) -> None:
    with pytest.raises(InvalidRequestError, match="path: String should have at least 1"):
        await submit(manager, repo_audit, {"path": ""})
    with pytest.raises(InvalidRequestError, match="markers: Value error, marker 'TO DO' must"):
        await submit(manager, repo_audit, {"path": ".", "markers": ["TO DO"]})
    with pytest.raises(InvalidRequestError, match=r"unknown argument 'ignores' \(it takes: path,"):
        await submit(manager, repo_audit, {"path": ".", "ignores": ["x"]})
    fenced = repo_audit.configure({"allowed_roots": [str(tree / "sub")]})
    outside = "outside the directories this server may"
    for path in (tree, tree / "sub" / "..", tree / "sub" / ".." / "sub" / "..", "/etc"):
        with pytest.raises(InvalidRequestError, match=outside):
            await submit(manager, fenced, {"path": str(path)})
    with pytest.raises(InvalidRequestError) as refused:
        await submit(manager, fenced, {"path": "/etc"})
    assert str(tree / "sub") in str(refused.value)  # the roots it may audit, and the setting
    assert "workflow_settings.repo_audit.allowed_roots" in str(refused.value)
    (tree / "sub" / "up").symlink_to(tree, target_is_directory=True)
    with pytest.raises(InvalidRequestError, match=outside):  # links resolved before the check
        await submit(manager, fenced, {"path": str(tree / "sub" / "up")})
    nothing = repo_audit.configure({"allowed_roots": []})
    with pytest.raises(InvalidRequestError, match="the operator has allowed none"):
        await submit(manager, nothing, {"path": str(tree)})
    assert not (await manager.list()).tasks
    await submit(manager, fenced, {"path": str(tree / "sub")})


async def test_a_link_swapped_out_of_the_allowed_roots_after_submit_fails_at_the_list_node(
    manager: TaskManager, store: TaskStore, tree: Path
) -> None:
    fenced = repo_audit.configure({"allowed_roots": [str(tree)], "reports_dir": str(tree)})
    (tree / "later").mkdir()
    task = await submit(manager, fenced, {"path": str(tree / "later")})
    (tree / "later").rmdir()
    (tree / "later").symlink_to(tree.parent, target_is_directory=True)
    async with running(manager, store, fenced):
        done = await finish(manager, task)
    assert done.error is not None
    assert "outside the directories this server may audit" in done.error.message
