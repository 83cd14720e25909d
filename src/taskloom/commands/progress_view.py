"""A run's progress in the terminal, from what the store records: the task's progress
(nodes settled of all) and state, and each node's (or map item's) checkpoint. The status
message is shown as it is, never parsed.

On a terminal, rich's ``Live`` redraws one line per phase in place, every line cut to the
terminal's width (nothing wraps, so redraws never stack); colour unless ``NO_COLOR``. In a
file or a pipe, one plain line per change.
"""

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TextIO

from taskloom.commands.pipe import silence_stdout
from taskloom.commands.say import wrapped
from taskloom.engine.dag import Workflow
from taskloom.engine.fanout import base_node, parse_item_key
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeRun
from taskloom.engine.shape import RunShape
from taskloom.engine.view import NodeView, fraction, node_view, shape_of

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.text import Text

WIDTH: Final = 24
"""The plain bar's width."""


def bar(fraction: float, width: int = WIDTH) -> str:
    """``[#########...............]`` for *fraction* in 0..1."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


@dataclass(frozen=True)
class PhaseProgress:
    """How far one phase is, from its nodes' checkpoints (a map counts its items)."""

    name: str
    done: int
    """Nodes (or items) completed: a node that failed or was stopped is not done."""
    total: int
    unit: str
    """``nodes`` or ``items``."""
    running: tuple[str, ...]
    failed: tuple[str, ...]
    """Nodes that failed themselves (not those stopped because the task ended)."""
    stopped: tuple[str, ...] = ()
    """Nodes stopped (or cancelled) while they ran because the task ended."""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


def overall(task: Task, workflow: Workflow[Any] | None = None) -> float:
    """The run's fraction done, as every view reads it (:func:`taskloom.engine.view.fraction`:
    nodes settled plus what running nodes reported)."""
    return fraction(task)


def phases(shape: RunShape, task: Task, nodes: Mapping[str, NodeRun]) -> list[PhaseProgress]:
    """Each phase of the run's *shape*, in order, with its counts."""
    items: dict[str, list[NodeRun]] = {}
    for key, run in nodes.items():
        if parse_item_key(key) is not None:
            items.setdefault(base_node(key), []).append(run)
    found = []
    for phase in shape.phases:
        names = shape.in_phase(phase)
        views = {name: node_view(task, nodes.get(name)) for name in names}
        mapped = [name for name in names if items.get(name)]
        if mapped and len(names) == len(mapped):
            runs = [run for name in mapped for run in items[name]]
            item_views = [node_view(task, run) for run in runs]
            done = sum(1 for view in item_views if view.label == "completed")
            planned = {node.name: node.items for node in shape.nodes if node.is_map}
            total = sum(max(planned.get(name) or 0, len(items[name])) for name in mapped)
            unit = "items"
            failed = tuple(name for name in mapped if _any_failed(task, items[name]))
            running = tuple(name for name in mapped if _any_busy(task, items[name]))
            stopped = tuple(name for name in mapped if _any_labelled(task, items[name], _STOPPED))
        else:
            for name in mapped:
                views[name] = _map_view(task, items[name])
            done = sum(1 for view in views.values() if view.label == "completed")
            total, unit = len(names), "nodes"
            failed = tuple(name for name, view in views.items() if view.label == "failed")
            running = tuple(name for name, view in views.items() if view.busy)
            stopped = tuple(name for name, view in views.items() if view.label in _STOPPED)
        found.append(PhaseProgress(phase, done, total, unit, running, failed, stopped))
    return found


_STOPPED = frozenset({"stopped", "cancelled"})


def _any_failed(task: Task, runs: Sequence[NodeRun]) -> bool:
    return _any_labelled(task, runs, frozenset({"failed"}))


def _any_labelled(task: Task, runs: Sequence[NodeRun], labels: frozenset[str]) -> bool:
    return any(node_view(task, run).label in labels for run in runs)


def _any_busy(task: Task, runs: Sequence[NodeRun]) -> bool:
    return any(node_view(task, run).busy for run in runs)


def _map_view(task: Task, runs: Sequence[NodeRun]) -> NodeView:
    views = [node_view(task, run) for run in runs]
    if all(view.settled for view in views):
        labels = {view.label for view in views}
        label = next(
            (label for label in ("failed", "cancelled", "stopped") if label in labels),
            "completed",
        )
        return NodeView(label, settled=True, busy=False)
    return NodeView("running", settled=False, busy=True)


class ProgressView:
    """Draws a run as its task and node checkpoints change."""

    def __init__(
        self,
        workflow: Workflow[Any] | None,
        stream: TextIO,
        *,
        live: bool,
        on_reader_left: Callable[[], None] = lambda: None,
    ) -> None:
        """*on_reader_left* is called once if the reader of *stream* (stdout) leaves
        (``| head -1``); the view then points stdout at the null device and draws no more."""
        self._workflow = workflow
        self._stream = stream
        self._on_reader_left = on_reader_left
        self._reader_left = False
        self._live_wanted = live
        self._live: Live | None = None
        self._last_line: str | None = None
        self._paused = False

    def update(self, task: Task, nodes: Mapping[str, NodeRun]) -> None:
        """Show *task* and its node checkpoints."""
        if self._paused:
            return
        if self._live_wanted:
            self._draw(self.renderable(task, nodes))
            return
        line = self.summary(task)
        if line != self._last_line:
            self._last_line = line
            self._write(line)

    def summary(self, task: Task) -> str:
        """One plain line: overall bar, percentage, state and status message."""
        fraction = overall(task, self._workflow)
        message = f"  {task.status_message}" if task.status_message else ""
        return f"  {bar(fraction)} {fraction:4.0%}  {task.state}{message}"

    def renderable(self, task: Task, nodes: Mapping[str, NodeRun]) -> "RenderableType":
        """The live drawing: a header line, then one line per phase, none wrapping."""
        from rich.table import Table
        from rich.text import Text

        fraction = overall(task, self._workflow)
        grid = Table.grid(padding=(0, 1), expand=False)
        grid.add_column(no_wrap=True)  # phase
        grid.add_column(no_wrap=True, width=WIDTH)  # bar
        grid.add_column(no_wrap=True, justify="right")  # counts
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)  # what happens
        header = Text(no_wrap=True, overflow="ellipsis")
        header.append(f"{task.state}", style=_state_style(str(task.state)))
        header.append(f" {fraction:4.0%}")
        if task.status_message:
            header.append(f"  {task.status_message}", style="dim")
        shape = shape_of(task, self._workflow)
        if shape is None:
            return header
        for phase in phases(shape, task, nodes):
            note = Text(no_wrap=True, overflow="ellipsis")
            parts = [
                (f"failed: {', '.join(phase.failed)}", "bold red", phase.failed),
                (f"{len(phase.stopped)} stopped", "yellow", phase.stopped),
                (f"running {', '.join(phase.running)}", "cyan", phase.running),
            ]
            for text, style, names in parts:
                if names:
                    note.append("  " if note.plain else "")
                    note.append(text, style=style)
            complete = phase.total > 0 and phase.done == phase.total
            grid.add_row(
                Text(phase.name, style="bold" if phase.running else ""),
                _bar(phase.fraction, "red" if phase.failed else "green"),
                f"{phase.done:,}/{phase.total:,} {phase.unit}"
                if phase.total or phase.unit == "nodes"
                else "",
                note if not complete else Text(""),
            )
        return _Stack(header, grid)

    def note(self, message: str) -> None:
        """Print *message* above the drawing (or as a line in a pipe)."""
        if self._live is not None:
            self._live.console.print(message, markup=False, highlight=False)
        elif self._live_wanted:  # a terminal: wrapped at spaces, never in a word
            self._write(wrapped(message, shutil.get_terminal_size().columns))
        else:
            self._write(message)

    def pause(self, message: str) -> None:
        """Stop drawing (e.g. while a question is asked) after printing *message*."""
        self._stop_live()
        self.note(message)
        self._paused = True

    def resume(self) -> None:
        """Draw again, below whatever was printed meanwhile."""
        self._paused = False

    def close(self) -> None:
        """Leave the last drawing on the screen and the cursor below it."""
        self._stop_live()
        self._write(None)

    def _write(self, line: str | None) -> None:
        """Write *line* (or only flush); when the reader has left, stop writing."""
        if self._reader_left:
            return
        try:
            if line is not None:
                self._stream.write(line + "\n")
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left = True
            silence_stdout()
            self._on_reader_left()

    def _draw(self, renderable: "RenderableType") -> None:
        if self._live is None:
            from rich.live import Live

            self._live = Live(
                renderable,
                console=_console(self._stream),
                auto_refresh=False,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
            return
        self._live.update(renderable, refresh=True)

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _bar(fraction: float, style: str) -> "Text":
    """A bar that reads without colour too (``NO_COLOR``, a screen capture)."""
    from rich.text import Text

    filled = round(max(0.0, min(fraction, 1.0)) * WIDTH)
    drawn = Text("█" * filled, style=style)
    drawn.append("░" * (WIDTH - filled), style="dim")
    return drawn


class _Stack:
    """Renderables one under the other (rich's ``Group``, typed for mypy)."""

    def __init__(self, *parts: "RenderableType") -> None:
        self.parts = parts

    def __rich__(self) -> "RenderableType":
        from rich.console import Group

        return Group(*self.parts)


def _console(stream: TextIO) -> "Console":
    from rich.console import Console

    return Console(file=stream, highlight=False)


def _state_style(state: str) -> str:
    return {
        "completed": "bold green",
        "failed": "bold red",
        "cancelled": "bold yellow",
        "input_required": "bold magenta",
    }.get(state, "bold cyan")
