"""A run's progress in the terminal: one bar per phase, redrawn in place on a terminal,
or one plain line per change when the output is a file or a pipe. Plain ANSI escapes.

Progress comes from what the store records: the task's status message (``phase 2/3
count: 12/40 numbers``) and each node's checkpoint.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO

from taskloom.engine.dag import Workflow
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeRun, NodeState

_STATUS: Final = re.compile(r"^phase (\d+)/(\d+) ([^:]+): (([\d.]+)(?:/([\d.]+))?.*)$")
_UP: Final = "\x1b[{}A"
_CLEAR_LINE: Final = "\r\x1b[2K"
WIDTH: Final = 24


@dataclass(frozen=True)
class PhaseStatus:
    """A status message of the runner, taken apart."""

    number: int
    phases: int
    phase: str
    done: float
    total: float | None
    detail: str
    """What follows the phase's name, e.g. ``12/40 numbers``."""

    @property
    def fraction(self) -> float | None:
        """How far the phase is, if its nodes report a total."""
        if not self.total:
            return None
        return min(self.done / self.total, 1.0)


def parse_status(message: str | None) -> PhaseStatus | None:
    """``phase 2/3 count: 12/40 numbers`` as its parts; ``None`` for other messages."""
    found = _STATUS.match(message or "")
    if found is None:
        return None
    number, phases, phase, detail, done, total = found.groups()
    return PhaseStatus(
        number=int(number),
        phases=int(phases),
        phase=phase,
        done=float(done),
        total=float(total) if total else None,
        detail=detail,
    )


def overall_from_status(message: str | None) -> float | None:
    """The run's fraction done judged from its status message alone (phases weigh the same)."""
    status = parse_status(message)
    if status is None:
        return None
    within = status.fraction or 0.0
    return min((status.number - 1 + within) / status.phases, 1.0)


def bar(fraction: float, width: int = WIDTH) -> str:
    """``[#########...............]`` for *fraction* in 0..1."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ProgressView:
    """Draws a run as its task and node checkpoints change."""

    def __init__(self, workflow: Workflow[Any] | None, stream: TextIO, *, live: bool) -> None:
        self._workflow = workflow
        self._stream = stream
        self._live = live and workflow is not None
        self._drawn = 0
        self._last_line: str | None = None
        self._paused = False

    def update(self, task: Task, nodes: Mapping[str, NodeRun]) -> None:
        """Show *task* and its node checkpoints."""
        if self._paused:
            return
        if self._live:
            self._redraw(self.lines(task, nodes))
            return
        line = self.summary(task, nodes)
        if line != self._last_line:
            self._last_line = line
            self._stream.write(line + "\n")
            self._stream.flush()

    def summary(self, task: Task, nodes: Mapping[str, NodeRun]) -> str:
        """One line: overall bar, percentage, state and status message."""
        fraction = self._overall(task, nodes)
        message = f"  {task.status_message}" if task.status_message else ""
        return f"  {bar(fraction)} {fraction:4.0%}  {task.state}{message}"

    def lines(self, task: Task, nodes: Mapping[str, NodeRun]) -> list[str]:
        """The header line and one line per phase."""
        lines = [self.summary(task, nodes)]
        if self._workflow is None:
            return lines
        width = max(len(phase) for phase in self._workflow.phases)
        for phase, fraction, detail in self._phases(task, nodes):
            lines.append(f"    {phase:<{width}} {bar(fraction)} {detail}".rstrip())
        return lines

    def note(self, message: str) -> None:
        """Print *message* below the drawing; the next drawing starts under it."""
        self._stream.write(message + "\n")
        self._stream.flush()
        self._drawn = 0

    def pause(self, message: str) -> None:
        """Stop drawing (e.g. while a question is asked) after printing *message*."""
        self.note(message)
        self._paused = True

    def resume(self) -> None:
        """Draw again, below whatever was printed meanwhile."""
        self._paused = False
        self._drawn = 0

    def close(self) -> None:
        """Leave the cursor below the drawing."""
        self._stream.flush()

    def _redraw(self, lines: list[str]) -> None:
        if self._drawn:
            self._stream.write(_UP.format(self._drawn))
        for line in lines:
            self._stream.write(_CLEAR_LINE + line + "\n")
        self._drawn = len(lines)
        self._stream.flush()

    def _overall(self, task: Task, nodes: Mapping[str, NodeRun]) -> float:
        if task.state == "completed":
            return 1.0
        if self._workflow is None:
            return overall_from_status(task.status_message) or 0.0
        total = len(self._workflow.nodes)
        weighted = 0.0
        for phase, fraction, _ in self._phases(task, nodes):
            weighted += fraction * self._size(phase)
        return weighted / total

    def _size(self, phase: str) -> int:
        assert self._workflow is not None
        return sum(1 for node in self._workflow.nodes.values() if node.phase == phase)

    def _phases(self, task: Task, nodes: Mapping[str, NodeRun]) -> list[tuple[str, float, str]]:
        assert self._workflow is not None
        status = parse_status(task.status_message)
        found: list[tuple[str, float, str]] = []
        for phase in self._workflow.phases:
            names = [n.name for n in self._workflow.nodes.values() if n.phase == phase]
            done = sum(1 for name in names if _settled(nodes.get(name)))
            fraction = done / len(names)
            detail = f"{done}/{len(names)} nodes"
            if status is not None and status.phase == phase and done < len(names):
                fraction = max(fraction, status.fraction or 0.0)
                detail += "  " + status.detail
            busy = [name for name in names if _busy(nodes.get(name))]
            if busy:
                detail += "  running " + ", ".join(busy)
            failed = [name for name in names if _failed(nodes.get(name))]
            if failed:
                detail += "  FAILED " + ", ".join(failed)
            found.append((phase, fraction, detail))
        return found


def _settled(run: NodeRun | None) -> bool:
    return run is not None and run.state in (NodeState.COMPLETED, NodeState.FAILED)


def _busy(run: NodeRun | None) -> bool:
    return run is not None and run.state in (NodeState.RUNNING, NodeState.RETRYING)


def _failed(run: NodeRun | None) -> bool:
    return run is not None and run.state is NodeState.FAILED
