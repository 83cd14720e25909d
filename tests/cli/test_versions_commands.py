"""The command line with several versions of a workflow (ADR 0039): `workflows list`
shows each, `tasks resume` keeps the run's version, `tasks upgrade` moves runs."""

import json
from pathlib import Path

import pytest

from tests.cli.test_commands import cli, mistake

SOURCE = """
from pydantic import BaseModel
from taskloom import NodeContext, Workflow

class In(BaseModel):
    n: int = 0

vflow = Workflow("vflow", version="{version}", input=In)

@vflow.node()
async def only(ctx: NodeContext[In]) -> str:
    return "ran version {version}"
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    """vflow_v1.py and vflow_v2.py."""
    paths = []
    for version in ("1", "2"):
        path = tmp_path / f"vflow_v{version}.py"
        path.write_text(SOURCE.format(version=version), encoding="utf-8")
        paths.append(str(path))
    return paths[0], paths[1]


def test_resume_keeps_the_runs_version_and_upgrade_moves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: tuple[str, str]
) -> None:
    v1, v2 = files
    db = str(tmp_path / "v.db")
    code, out, _ = cli(capsys, "run", "vflow", "--workflows", v1, "--db", db)
    assert code == 0
    assert '"ran version 1"' in out
    _, listed, _ = cli(capsys, "tasks", "list", "--db", db, "--json")
    (done,) = json.loads(listed)["tasks"]
    both = ["--workflows", v1, "--workflows", v2, "--db", db]
    _, resumed, _ = cli(capsys, "tasks", "resume", done["id"], "--from", "only", *both, "--json")
    queued = json.loads(resumed)["task"]
    assert queued["workflow_version"] == "1"
    err = mistake(
        capsys, "tasks", "resume", done["id"], "--from", "only", "--workflows", v2, "--db", db
    )
    assert err == (
        f"taskloom: error: task {done['id']} ran vflow version 1, which is not loaded here "
        "(loaded versions: 2); load it with --workflows MODULE|FILE.py\n"
    )
    _, versions, _ = cli(capsys, "workflows", "list", *both, "--json")
    lines = {(line["version"], line["note"]) for line in json.loads(versions)["versions"]}
    assert ("1", "draining: 1 unfinished run") in lines
    assert ("2", "newest: new calls get it") in lines
    code, moved, _ = cli(capsys, "tasks", "upgrade", queued["id"], "--to", "2", *both)
    assert (code, moved) == (0, f"moved {queued['id']} from vflow version 1 to 2 (kept: none)\n")
    _, versions, _ = cli(capsys, "workflows", "list", *both)
    assert "safe to remove" in versions
    err = mistake(capsys, "tasks", "upgrade", queued["id"], "--to", "2", *both)
    assert err == f"taskloom: error: task {queued['id']} is on vflow version 2 already\n"
    err = mistake(
        capsys, "workflows", "list", "--workflows", v1, "--workflows", v1.replace("v1", "x/v1")
    )
    assert "no such file" in err


def test_two_files_of_one_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: tuple[str, str]
) -> None:
    v1, _ = files
    (tmp_path / "other").mkdir()
    twin = tmp_path / "other" / "vflow_v1.py"
    twin.write_text(SOURCE.format(version="2"), encoding="utf-8")
    err = mistake(capsys, "workflows", "list", "--workflows", v1, "--workflows", str(twin))
    assert err == (
        f"taskloom: error: --workflows {v1} and {twin} are both the module 'vflow_v1': give the "
        "files different names (e.g. flows_v1.py and flows_v2.py)\n"
    )


def test_a_project_file_loads_two_versions_side_by_side(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "taskloom.toml").write_text(
        'db = "p.db"\nworkflows = ["vflow_v2.py", "vflow_v1.py"]\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TASKLOOM_DB", raising=False)
    _, listed, _ = cli(capsys, "workflows", "list", "--json")
    versions = [
        flow["version"] for flow in json.loads(listed)["workflows"] if flow["name"] == "vflow"
    ]
    assert versions == ["1", "2"]  # ordered as numbers, whatever the file's order
    code, out, _ = cli(capsys, "run", "vflow")
    assert code == 0
    assert '"ran version 2"' in out
