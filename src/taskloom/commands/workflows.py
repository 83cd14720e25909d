"""``taskloom workflows list|show``: the workflows this process can run, and their DAGs."""

from types import CodeType
from typing import Any

from taskloom.bootstrap import load_workflows
from taskloom.commands.arguments import TaskArgs, WorkflowArgs
from taskloom.commands.base import EXIT_OK
from taskloom.commands.common import find_workflow, print_json, settings_from
from taskloom.commands.render import table, when
from taskloom.commands.versions import line_json, loaded_where, note, read_report
from taskloom.config import DEFAULT_DATABASE
from taskloom.engine.dag import MapNode, Node, Workflow
from taskloom.persistence.factory import describe_database


async def list_workflows(args: TaskArgs) -> int:
    """One line per loaded workflow version; then, when the database exists, each
    version it stores runs of or a live worker has: unfinished runs, the oldest, and
    whether it is safe to remove (ADR 0039)."""
    workflows = load_workflows(settings_from(args.db, args.workflows))
    loaded = workflows.loaded()
    report = await read_report(str(args.db), frozenset(loaded))
    if args.json:
        shown: dict[str, Any] = {"workflows": [describe(each) for each in loaded.values()]}
        if report is not None:
            shown["versions"] = [line_json(line) for line in report]
        print_json(shown)
        return EXIT_OK
    rows = [["WORKFLOW", "VERSION", "NODES", "PHASES", "DESCRIPTION"]]
    rows += [
        [
            workflow.name,
            workflow.version,
            str(len(workflow.nodes)),
            " > ".join(workflow.phases),
            workflow.title or workflow.description.split("\n")[0],
        ]
        for workflow in loaded.values()
    ]
    print("\n".join(table(rows)))
    if report:
        print(f"\nversions in {describe_database(str(args.db))}:")
        versions = [["WORKFLOW", "VERSION", "LOADED", "UNFINISHED", "OLDEST", "NOTE"]]
        versions += [
            [
                line.name,
                line.version or "(none recorded)",
                loaded_where(line),
                str(line.unfinished),
                when(line.oldest) if line.oldest is not None else "",
                note(line),
            ]
            for line in report
        ]
        print("\n".join(table(versions)))
    return EXIT_OK


async def show_workflow(args: WorkflowArgs) -> int:
    """The DAG, phase by phase, and the input fields."""
    workflow = find_workflow(
        load_workflows(settings_from(str(DEFAULT_DATABASE), args.workflows)), args.name
    )
    if args.json:
        print_json(describe(workflow))
        return EXIT_OK
    print("\n".join(draw(workflow)))
    return EXIT_OK


def describe(workflow: Workflow[Any]) -> dict[str, Any]:
    """A workflow as JSON: phases with their nodes, the result node and the input schema."""
    return {
        "name": workflow.name,
        "version": workflow.version,
        "title": workflow.title,
        "description": workflow.description,
        "phases": [
            {"name": phase, "nodes": [_node_json(node) for node in _in_phase(workflow, phase)]}
            for phase in workflow.phases
        ],
        "result_node": workflow.result_node,
        "input_schema": workflow.input_schema(),
    }


def draw(workflow: Workflow[Any]) -> list[str]:
    """The DAG as text: each phase a band, each node with the nodes it waits for."""
    lines = [f"{workflow.name} (version {workflow.version})" + _title(workflow)]
    if workflow.description:
        lines.append(f"  {workflow.description.splitlines()[0]}")
    phases = workflow.phases
    width = max(len(name) for name in workflow.nodes)
    for number, phase in enumerate(phases, start=1):
        nodes = _in_phase(workflow, phase)
        if number == 1:
            lines.append("")
        size = f"{len(nodes)} nodes, in parallel" if len(nodes) > 1 else "1 node"
        lines.append(f"phase {number}/{len(phases)}: {phase} ({size})")
        for node in nodes:
            waits = f" <- {', '.join(node.deps)}" if node.deps else ""
            lines.append(f"  [{node.name:<{width}}]{waits}{_policies(workflow, node)}")
        if number < len(phases):
            lines.append("      |")
    lines += ["", "input:", *_input_lines(workflow)]
    return lines


def _title(workflow: Workflow[Any]) -> str:
    return f": {workflow.title}" if workflow.title else ""


def _in_phase(workflow: Workflow[Any], phase: str) -> list[Node[Any]]:
    return [
        workflow.nodes[name] for name in workflow.order() if workflow.nodes[name].phase == phase
    ]


def starts_children(node: Node[Any]) -> bool:
    """Whether *node*'s function calls ``ctx.child`` (read from its code: a child workflow
    is started at run time, not declared)."""
    code = getattr(node.function, "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        if "child" in current.co_names:
            return True
        stack += [const for const in current.co_consts if isinstance(const, CodeType)]
    return False


def _kind(node: Node[Any]) -> str:
    if isinstance(node, MapNode):
        return "map"
    return "children" if starts_children(node) else "node"


def _policies(workflow: Workflow[Any], node: Node[Any]) -> str:
    notes = []
    if isinstance(node, MapNode):
        at_once = f", {node.concurrency} at once" if node.concurrency else ""
        notes.append(f"map: an item per element of the output of {node.over}{at_once}")
        if str(node.on_item_failure) != "fail":
            notes.append(f"failed items: {node.on_item_failure}")
    elif starts_children(node):
        notes.append("starts child workflows")
    if node.retry.max_attempts > 1:
        notes.append(f"up to {node.retry.max_attempts} attempts")
    if node.timeout_s is not None:
        notes.append(f"timeout {node.timeout_s:g} s")
    if node.may_fail:
        notes.append("may fail")
    if workflow.result_node == node.name:
        notes.append("gives the result")
    return f"   ({'; '.join(notes)})" if notes else ""


def _node_json(node: Node[Any]) -> dict[str, Any]:
    shape: dict[str, Any] = {"kind": _kind(node)}
    if isinstance(node, MapNode):
        shape |= {
            "over": node.over,
            "concurrency": node.concurrency,
            "on_item_failure": str(node.on_item_failure),
        }
    return {
        "name": node.name,
        **shape,
        "deps": list(node.deps),
        "max_attempts": node.retry.max_attempts,
        "timeout_s": node.timeout_s,
        "may_fail": node.may_fail,
    }


def _input_lines(workflow: Workflow[Any]) -> list[str]:
    schema = workflow.input_schema()
    required = set(schema.get("required", []))
    rows = [["  FIELD", "TYPE", "DEFAULT", "MEANING"]]
    for name, field in schema.get("properties", {}).items():
        kind = field.get("type") or " | ".join(
            str(option.get("type", "?")) for option in field.get("anyOf", [])
        )
        default = "(required)" if name in required else repr(field.get("default"))
        rows.append([f"  {name}", str(kind), default, str(field.get("description", ""))])
    return table(rows) if len(rows) > 1 else ["  (no fields)"]
