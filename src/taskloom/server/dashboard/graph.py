"""A run's DAG laid out for SVG: phases as columns, nodes as boxes with their state, a map
node as one stacked box with its items counted, edges from each dependency."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from taskloom.engine.fanout import base_node, parse_item_key
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeRun
from taskloom.engine.shape import RunShape
from taskloom.engine.view import map_view, node_view

COLUMN_WIDTH: Final = 236
COLUMN_GAP: Final = 50
BOX_HEIGHT: Final = 46
BOX_GAP: Final = 14
TOP: Final = 34
PAD: Final = 12


@dataclass(frozen=True)
class Box:
    """One node as drawn."""

    name: str
    phase: str
    state: str
    x: int
    y: int
    is_map: bool
    detail: str
    """Under the name: the attempt count, or a map's item counts."""

    @property
    def width(self) -> int:
        """The box's width."""
        return COLUMN_WIDTH - 2 * PAD


@dataclass(frozen=True)
class Edge:
    """A dependency, as an SVG path: from the right of the needed box to the left of the
    needing one, or, within one column, a curve on their left."""

    path: str

    @classmethod
    def between(cls, needed: Box, needing: Box) -> "Edge":
        """The edge from *needed* to *needing*."""
        y1, y2 = needed.y + BOX_HEIGHT // 2, needing.y + BOX_HEIGHT // 2
        if needed.x == needing.x:
            x = needed.x
            bend = x - PAD + 2
            return cls(f"M{x},{y1} C{bend},{y1} {bend},{y2} {x},{y2}")
        x1, x2 = needed.x + needed.width, needing.x
        return cls(f"M{x1},{y1} C{x1 + 25},{y1} {x2 - 25},{y2} {x2},{y2}")


@dataclass(frozen=True)
class Graph:
    """Everything the SVG template draws."""

    phases: tuple[tuple[str, int], ...]
    """Each phase's title and the x of its column."""
    boxes: tuple[Box, ...]
    edges: tuple[Edge, ...]
    width: int
    height: int


def layout(task: Task, shape: RunShape | None, nodes: Mapping[str, NodeRun]) -> Graph:
    """The graph of *task*, a run of *shape* whose checkpoints are *nodes* (without a
    shape, the checkpointed nodes in one column); each box's state is what a person
    reads (:func:`taskloom.engine.view.node_view`), never a raw checkpoint."""
    items: dict[str, list[NodeRun]] = {}
    for key, run in nodes.items():
        if parse_item_key(key) is not None:
            items.setdefault(base_node(key), []).append(run)
    planned: dict[str, int | None] = {}
    if shape is not None:
        columns = [(phase, shape.in_phase(phase)) for phase in shape.phases]
        planned = {node.name: node.items for node in shape.nodes if node.is_map}
        deps = {node.name: node.deps for node in shape.nodes}
    else:
        plain = sorted(key for key in nodes if parse_item_key(key) is None)
        columns = [("nodes", plain + sorted(set(items) - set(plain)))]
        planned, deps = dict.fromkeys(items), {}
    boxes: dict[str, Box] = {}
    phases = []
    for index, (phase, names) in enumerate(columns):
        x = index * (COLUMN_WIDTH + COLUMN_GAP)
        phases.append((phase, x))
        for row, name in enumerate(names):
            y = TOP + row * (BOX_HEIGHT + BOX_GAP)
            if name in planned:
                state, detail = map_view(task, items.get(name, []), planned[name])
            else:
                found = nodes.get(name)
                state = node_view(task, found).label
                detail = _attempts(found)
            boxes[name] = Box(name, phase, state, x + PAD, y, name in planned, detail)
    edges = tuple(
        Edge.between(boxes[dep], boxes[name])
        for name, needs in deps.items()
        for dep in needs
        if name in boxes and dep in boxes
    )
    rows = max((len(names) for _, names in columns), default=0)
    return Graph(
        phases=tuple(phases),
        boxes=tuple(boxes.values()),
        edges=edges,
        width=max(len(columns), 1) * (COLUMN_WIDTH + COLUMN_GAP) - COLUMN_GAP,
        height=TOP + max(rows, 1) * (BOX_HEIGHT + BOX_GAP),
    )


def _attempts(run: NodeRun | None) -> str:
    if run is None:
        return "not started"
    text = f"attempt {run.attempt}"
    if run.failures:
        text += f", {run.failures} failed"
    if run.interruptions:
        text += f", {run.interruptions} interrupted"
    return text
