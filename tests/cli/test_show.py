"""Issue 17, item 4: ``tasks show`` as an operator reads it, and ``workflows show`` with
map and child-workflow nodes for what they are."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_commands import FLOWS, cli


def _last_id(capsys: pytest.CaptureFixture[str], db: str) -> str:
    task_id: str = json.loads(cli(capsys, "tasks", "list", "--db", db, "--json")[1])["tasks"][0][
        "id"
    ]
    return task_id


def _show(capsys: pytest.CaptureFixture[str], db: str, task_id: str, *flags: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(
        cli(capsys, "tasks", "show", task_id, "--db", db, "--json", *flags)[1]
    )
    return shown


def test_a_failed_run_shows_the_failure_only_where_it_happened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    failing = '{"start": 400, "tick_s": 0.002, "fail_at": 250}'  # lane_2 fails, others run on
    assert cli(capsys, "run", "countdown", failing, "--db", db)[0] == 1
    task_id = _last_id(capsys, db)
    nodes = {node["node"]: node for node in _show(capsys, db, task_id)["nodes"]}
    assert nodes["lane_2"]["state"] == "failed"
    assert "told to fail at 250" in nodes["lane_2"]["error"]
    others = [nodes[name] for name in ("lane_0", "lane_1", "lane_3")]
    assert {node["state"] for node in others} <= {"stopped", "completed"}
    assert "stopped" in {node["state"] for node in others}
    assert all(node["error"] is None for node in others)
    assert nodes["report"]["state"] == "not started"
    assert all(nodes[name]["seconds"] is not None for name in ("plan", "lane_2"))
    out = cli(capsys, "tasks", "show", task_id, "--db", db)[1]
    assert "the task was cancelled" not in out
    assert "stopped when the task ended" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["PHASE", "NODE", "STATE", "ATTEMPTS", "TOOK", "NOTE"]
    assert [line.split()[0] for line in table[1:] if not line.startswith(" ")] == [
        "plan",
        "count",
        "report",
    ]  # phases in order, each named once
    assert [line for line in table if "failed" in line.split()[:3]] == [
        line for line in table if "lane_2" in line
    ]
    timeline = out.split("timeline:\n", 1)[1].splitlines()
    assert timeline[1].split() == ["+0.0", "s", "task", "created"]
    assert timeline[-1].endswith("task failed")
    assert any("lane_2 failed" in line for line in timeline)


def test_map_items_fold_into_their_map(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # repo_audit reads under the working directory
    tree = tmp_path / "tree"
    tree.mkdir()
    for number in range(150):  # three batches of 64 files: three items
        (tree / f"f{number}.txt").write_text("x\n")
    db = str(tmp_path / "t.db")
    code, out, _ = cli(capsys, "run", "repo_audit", json.dumps({"path": "tree"}), "--db", db)
    assert code == 0, out
    task_id = _last_id(capsys, db)
    nodes = _show(capsys, db, task_id)["nodes"]
    analyse = next(node for node in nodes if node["node"] == "analyse")
    assert (analyse["state"], analyse["items"]) == ("completed", "3 items: 3 completed")
    assert [node["node"] for node in nodes if node.get("item_of") == "analyse"] == [
        "analyse[0]",
        "analyse[1]",
        "analyse[2]",
    ]
    out = cli(capsys, "tasks", "show", task_id, "--db", db)[1]
    assert "analyse[" not in out  # folded: the map's row counts them
    assert "3 items: 3 completed" in out
    assert "analyse (map) completed" in out


def test_children_are_listed_under_the_node_that_started_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "t.db")
    code, out, _ = cli(capsys, "run", "family", '{"x": 3}', "--workflows", FLOWS, "--db", db)
    assert code == 0, out
    assert out.rstrip().endswith("Result:\n13")
    listed = json.loads(
        cli(capsys, "tasks", "list", "--workflow", "family", "--db", db, "--json")[1]
    )
    (parent,) = listed["tasks"]
    children = _show(capsys, db, parent["id"], "--workflows", FLOWS)["children"]
    assert [(child["workflow"], child["node"], child["state"]) for child in children] == [
        ("double", "spawn", "completed"),
        ("double", "spawn", "completed"),
    ]
    out = cli(capsys, "tasks", "show", parent["id"], "--db", db, "--workflows", FLOWS)[1]
    assert "children (2):" in out
    assert f"spawn  {children[0]['id']}  double    completed" in out


def test_workflows_show_marks_maps_and_child_workflows(capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(capsys, "workflows", "show", "repo_audit")[1]
    assert (
        "[analyse   ] <- batches, list_files   (map: an item per element of the output of batches, 8 at once)"
        in out
    )
    shown = json.loads(cli(capsys, "workflows", "show", "repo_audit", "--json")[1])
    (analyse,) = shown["phases"][1]["nodes"]
    assert (analyse["kind"], analyse["over"], analyse["concurrency"]) == ("map", "batches", 8)
    out = cli(capsys, "workflows", "show", "family", "--workflows", FLOWS)[1]
    assert "[spawn]   (starts child workflows)" in out
    family = json.loads(
        cli(capsys, "workflows", "show", "family", "--workflows", FLOWS, "--json")[1]
    )
    assert [node["kind"] for phase in family["phases"] for node in phase["nodes"]] == [
        "children",
        "node",
    ]


def test_a_runs_shape_is_stored_with_it_so_show_needs_no_workflow_module(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 26, item 2: a run of a workflow from a module ``tasks show`` does not load
    shows its phases and its map's row with the item counts (plain and ``--json``)."""
    db = str(tmp_path / "t.db")
    code, out, _ = cli(
        capsys, "run", "wide", '{"n": 600}', "--db", db, "--workflows", "tests.cli.flows"
    )
    assert code == 0, out
    task_id = _last_id(capsys, db)
    shown = _show(capsys, db, task_id)  # no --workflows: the module is not loaded
    assert [stage["phase"] for stage in shown["task"]["shape"]["nodes"]] == ["list", "spread"]
    nodes = {node["node"]: node for node in shown["nodes"] if not node.get("item_of")}
    assert list(nodes) == ["listing", "square"]
    assert (nodes["listing"]["phase"], nodes["square"]["phase"]) == ("list", "spread")
    assert (nodes["square"]["state"], nodes["square"]["items"]) == (
        "completed",
        "600 items: 600 completed",
    )
    out = cli(capsys, "tasks", "show", task_id, "--db", db)[1]
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["PHASE", "NODE", "STATE", "ATTEMPTS", "TOOK", "NOTE"]
    rows = [line.split() for line in table[1:]]
    assert rows[0][:3] == ["list", "listing", "completed"]
    assert rows[1][:3] == ["spread", "square", "completed"]
    assert "600 items: 600 completed" in table[2]
