"""Finding workflows: modules named by the operator and the ``taskloom.workflows`` entry points."""

import textwrap
from pathlib import Path

import pytest

from taskloom.engine.errors import UnknownWorkflowError, WorkflowDefinitionError
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
    changed = FLOWS.format(name="mine").replace("ctx.input.n", "ctx.input.n + 1")
    (tmp_path / "my_flows_again.py").write_text(changed, encoding="utf-8")
    (tmp_path / "my_flows_copy.py").write_text(FLOWS.format(name="mine"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = WorkflowRegistry()
    assert registry.load_module("my_flows") == ["mine"]
    assert registry.load_module("my_flows_copy") == ["mine"]  # the same definition again
    with pytest.raises(WorkflowDefinitionError) as caught:
        registry.load_module("my_flows_again")
    assert str(caught.value) == (
        "two modules define mine version 1 differently: give the changed one a new version"
    )
    assert registry.versions("mine") == (registry["mine"],)
    assert registry["mine"].nodes["only"].function.__module__ == "my_flows"


VERSIONED = """
from pydantic import BaseModel
from taskloom import NodeContext, Workflow

class In(BaseModel):
    n: int = 1

flow = Workflow("vflow", version="{version}", input=In)

@flow.node()
async def only(ctx: NodeContext[In]) -> str:
    return "{version}"
"""


def _versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *versions: str) -> list[str]:
    modules = []
    for number, version in enumerate(versions):
        module = f"vflow_{tmp_path.name}_{number}"
        source = VERSIONED.format(version=version)
        (tmp_path / f"{module}.py").write_text(source, encoding="utf-8")
        modules.append(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    return modules


def test_several_versions_of_a_workflow_load_side_by_side_newest_first_for_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = WorkflowRegistry()
    for module in _versions(tmp_path, monkeypatch, "2", "1.10", "10", "1.2"):
        registry.load_module(module)
    assert [flow.version for flow in registry.versions("vflow")] == ["1.2", "1.10", "2", "10"]
    assert registry["vflow"].version == "10"
    assert list(registry) == ["vflow"]
    assert registry.version("vflow", "1.10").version == "1.10"
    assert registry.version("vflow", None).version == "10"
    assert set(registry.loaded()) == {("vflow", v) for v in ("1.2", "1.10", "2", "10")}
    with pytest.raises(UnknownWorkflowError, match=r"vflow version 3 is not loaded"):
        registry.version("vflow", "3")


def test_versions_that_cannot_be_ordered_are_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = WorkflowRegistry()
    first, second = _versions(tmp_path, monkeypatch, "1", "beta")
    registry.load_module(first)
    with pytest.raises(WorkflowDefinitionError) as caught:
        registry.load_module(second)
    assert str(caught.value) == (
        "cannot order vflow versions '1' and 'beta': with several versions loaded, each "
        "must be a number (dotted integers such as 2 or 1.10)"
    )
    assert [flow.version for flow in registry.versions("vflow")] == ["1"]


def test_a_lone_version_may_be_any_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = WorkflowRegistry()
    (module,) = _versions(tmp_path, monkeypatch, "beta")
    registry.load_module(module)
    assert registry["vflow"].version == "beta"


def test_entry_points_may_bring_several_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(
        tmp_path,
        "versions_plugin",
        """
        [taskloom.workflows]
        old = plugin_v1:flow
        new = plugin_v2
        """,
        {
            "plugin_v1": VERSIONED.format(version="1"),
            "plugin_v2": VERSIONED.format(version="2"),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = WorkflowRegistry()
    registry.load_entry_points()
    assert [flow.version for flow in registry.versions("vflow")] == ["1", "2"]
    assert registry["vflow"].version == "2"
