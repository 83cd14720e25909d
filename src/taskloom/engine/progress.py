"""Progress of one run: which phase it is in, how many nodes are done, what nodes report.

Messages read like ``phase 2/3 analyse: 120/400 files`` (the nodes of a phase that report
are summed), ``phase 2/3 analyse: 5/8 nodes``, or, in a phase with map nodes,
``phase 2/3 analyse: 2,400/10,000 items`` (their items summed). Writes are coalesced: the newest state
is written at most once per interval.

The progress stored with the message counts nodes: those settled, plus the part of each
unsettled node that it reported (``done/total`` of its own reports, or of its items for a
map, each item counting the part it reported). A long single node that reports 40/100 is
0.4 of one node along, not 0 until it ends (ADR 0042).
"""

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from anyio.abc import TaskGroup

from taskloom.engine.dag import Node, Workflow

ProgressWrite = Callable[[float, float, str], Awaitable[None]]


class RunProgress:
    """Counts settled nodes per phase and turns node reports into one status line."""

    def __init__(self, workflow: Workflow[Any]) -> None:
        self._phases = workflow.phases
        self._total = len(workflow.nodes)
        self._sizes = dict.fromkeys(self._phases, 0)
        for node in workflow.nodes.values():
            self._sizes[node.phase] += 1
        self._done = dict.fromkeys(self._phases, 0)
        self._reports: dict[str, tuple[float, float | None]] = {}
        self._sums: dict[str, list[float]] = {}
        """Per phase: completed and total summed over reporting nodes, and how many of
        them report no total."""
        self._items_total: dict[str, dict[str, int]] = {}
        """Per phase: the item count of each of its map nodes expanded so far."""
        self._items_done = dict.fromkeys(self._phases, 0)
        self._node_items: dict[str, list[int]] = {}
        """Per map node: items settled and items planned."""
        self._parts: dict[str, dict[str, float]] = {}
        """Per unsettled node: the reported fraction of each reporting key (itself, or
        each item of a map), dropped as the node (or item) settles."""
        self._settled_nodes: set[str] = set()
        self._latest: Callable[[], str] | None = None
        """The newest status line, made when it is written (a map's items change it
        10,000 times; it is written once per interval)."""
        self._changed = anyio.Event()
        self._stopped = anyio.Event()
        self._start_publisher: Callable[[], object] | None = None

    @property
    def summary(self) -> str:
        """The closing line of a completed run."""
        nodes, phases = self._total, len(self._phases)
        return (
            f"completed {nodes} node{'s' if nodes != 1 else ''}"
            f" in {phases} phase{'s' if phases != 1 else ''}"
        )

    @property
    def planned_items(self) -> dict[str, int]:
        """Each expanded map node's item count, by node name."""
        return {name: counts[1] for name, counts in self._node_items.items()}

    @property
    def completed(self) -> float:
        """Nodes settled, plus the reported part of each node not settled yet."""
        done = float(sum(self._done.values()))
        for name, parts in self._parts.items():
            if name in self._settled_nodes:
                continue
            items = self._node_items.get(name)
            if items is not None:
                settled, planned = items
                done += min((settled + sum(parts.values())) / planned, 1.0) if planned else 0.0
            else:
                done += min(sum(parts.values()), 1.0)
        for name, (settled, planned) in self._node_items.items():
            if name not in self._parts and name not in self._settled_nodes and planned:
                done += settled / planned
        return min(done, float(self._total))

    def settled(self, node: Node[Any]) -> None:
        """*node* completed or failed for good."""
        self._done[node.phase] += 1
        self._settled_nodes.add(node.name)
        self._parts.pop(node.name, None)

    def phase_moved(self) -> None:
        """A node finished: say how far the current phase is."""
        phase = self._current_phase()
        if phase in self._items_total:
            self._say_items(phase)
        else:
            self._say(phase, lambda: f"{self._done[phase]}/{self._sizes[phase]} nodes")

    def items_planned(self, node: Node[Any], count: int) -> None:
        """Map node *node* expanded to *count* items (again, on a resume: same count)."""
        self._items_total.setdefault(node.phase, {})[node.name] = count
        self._node_items.setdefault(node.name, [0, count])[1] = count

    def item_settled(self, node: Node[Any], key: str | None = None) -> None:
        """An item of map node *node* (*key*: the item's run) completed or failed for good."""
        self._items_done[node.phase] += 1
        self._node_items.setdefault(node.name, [0, 0])[0] += 1
        if key is not None:
            self._parts.get(node.name, {}).pop(key, None)
        if node.phase in self._items_total:
            self._say_items(node.phase)

    def node_reported(
        self,
        node: Node[Any],
        completed: float,
        total: float | None,
        unit: str | None,
        *,
        key: str | None = None,
    ) -> None:
        """A node's own progress, summed with the other reports of its phase (*key*:
        the node run reporting, one item of a map)."""
        key = key or node.name
        sums = self._sums.setdefault(node.phase, [0.0, 0.0, 0])
        old_completed, old_total = self._reports.get(key, (0.0, None))
        sums[0] += completed - old_completed
        sums[1] += (total or 0.0) - (old_total or 0.0)
        sums[2] += (total is None) - (old_total is None and key in self._reports)
        self._reports[key] = (completed, total)
        if total:
            part = max(0.0, min(completed / total, 1.0))
            self._parts.setdefault(node.name, {})[key] = part
        done, planned, without_total = sums
        amount = f"{done:g}" if without_total else f"{done:g}/{planned:g}"
        said = amount + (f" {unit}" if unit else "")
        self._say(node.phase, lambda: said)

    def status(self, message: str | Callable[[], str]) -> None:
        """Show *message* as it is (e.g. a retry wait), or the line it makes when written."""
        self._latest = message if callable(message) else lambda: message
        self._changed.set()
        start, self._start_publisher = self._start_publisher, None
        if start is not None:
            start()

    def publish_in(self, task_group: TaskGroup, write: ProgressWrite, interval_s: float) -> None:
        """Run :meth:`publish` in *task_group* from the first change on: a run that has
        nothing to say before its outcome (one node, say) costs no task. May be called
        again after :meth:`stop` (a run that goes on after a wait ended)."""
        self._stopped = anyio.Event()
        self._start_publisher = partial(task_group.start_soon, self.publish, write, interval_s)
        if self._latest is not None:
            self.status(self._latest)

    async def publish(self, write: ProgressWrite, interval_s: float) -> None:
        """Write the newest state whenever it changes, at most once per *interval_s*,
        until :meth:`stop` (a write under way is finished, never cut off)."""
        while True:
            await self._changed.wait()
            if self._stopped.is_set():
                return
            self._changed = anyio.Event()
            if self._latest is not None:
                await write(self.completed, float(self._total), self._latest())
            with anyio.move_on_after(interval_s):
                await self._stopped.wait()

    def stop(self) -> None:
        """End :meth:`publish`: the run's outcome carries its last word."""
        self._start_publisher = None
        self._stopped.set()
        self._changed.set()

    def _say_items(self, phase: str) -> None:
        # one object per call, not two closures: a map says this once per item
        self.status(partial(self._items_line, phase))

    def _items_line(self, phase: str) -> str:
        total = sum(self._items_total[phase].values())
        return self._line(phase, f"{self._items_done[phase]:,}/{total:,} items")

    def _line(self, phase: str, detail: str) -> str:
        number = self._phases.index(phase) + 1
        return f"phase {number}/{len(self._phases)} {phase}: {detail}"

    def _say(self, phase: str, detail: Callable[[], str]) -> None:
        def line() -> str:
            return self._line(phase, detail())

        self.status(line)

    def _current_phase(self) -> str:
        for phase in self._phases:
            if self._done[phase] < self._sizes[phase]:
                return phase
        return self._phases[-1]
