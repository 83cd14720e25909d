"""Finding workflows: modules named by the operator and the ``taskloom.workflows`` entry points."""

import textwrap
from pathlib import Path

import pytest

from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.registry import WorkflowRegistry

FLOWS = """
from pydantic import BaseModel
from taskloom import NodeContext, Workflow

class In(BaseModel):
    n: int = 1

{name} = Workflow("{name}", version="1", input=In)

@{name}.node()
async def only(ctx: NodeContext[In]) -> int:
    return ctx.input.n
"""


def _install(root: Path, distribution: str, entry_points: str, modules: dict[str, str]) -> None:
    """Lay out an installed distribution (its dist-info and modules) under *root*."""
    info = root / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points), encoding="utf-8")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source, encoding="utf-8")


def test_entry_points_name_a_workflow_or_a_module_of_workflows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(
        tmp_path,
        "flows_plugin",
        """
        [taskloom.workflows]
        one = plugin_one:alpha
        many = plugin_many
        """,
        {
            "plugin_one": FLOWS.format(name="alpha"),
            "plugin_many": FLOWS.format(name="beta") + FLOWS.format(name="gamma"),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = WorkflowRegistry()
    assert sorted(registry.load_entry_points()) == ["alpha", "beta", "gamma"]
    assert set(registry) == {"alpha", "beta", "gamma"}


def test_a_broken_entry_point_is_named_in_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(
        tmp_path,
        "broken_plugin",
        """
        [taskloom.workflows]
        broken = plugin_broken:flow
        """,
        {"plugin_broken": "raise RuntimeError('missing API key')\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WorkflowDefinitionError) as caught:
        WorkflowRegistry().load_entry_points()
    message = str(caught.value)
    assert "'broken'" in message
    assert "plugin_broken:flow" in message
    assert "RuntimeError: missing API key" in message


def test_a_workflow_module_named_by_the_operator_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_flows.py").write_text(FLOWS.format(name="mine"), encoding="utf-8")
    (tmp_path / "my_flows_again.py").write_text(FLOWS.format(name="mine"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = WorkflowRegistry()
    assert registry.load_module("my_flows") == ["mine"]
    with pytest.raises(WorkflowDefinitionError, match="two workflows are named 'mine'"):
        registry.load_module("my_flows_again")
