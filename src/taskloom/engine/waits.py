"""Durable waits: what a waiting node waits for, and when the wait is over (ADR 0021).

A node that waits (``ctx.ask`` with no answer stored yet, ``ctx.sleep`` before its time)
ends its attempt as ``waiting``, recording what it waits for. Once nothing else of its
run can go on, the run is *parked*: the task is marked ``parked`` with the time it may
be claimed again (``wake_at``: its earliest timer, or ``None`` until an answer arrives)
and the lease is dropped in the same write, so no worker holds anything. An answer
stored, or the timer's time, makes the run claimable; the node then runs again from its
start and the same call returns at once (replay by key, ``<node>#<n>``).

A wait is written ``<kind>:<key>``: ``input:<question key>``, ``timer:<sleep key>`` or
``child:<task id>`` (a child workflow's end, ADR 0026): whatever stores the awaited thing
(an answer, the child's end) also sets the parked task's ``wake_at``.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from taskloom.engine.models import InputRequest, Task

WaitKind = Literal["input", "timer", "child"]


@dataclass(frozen=True)
class Wait:
    """One thing a node waits for."""

    kind: WaitKind
    key: str

    def encode(self) -> str:
        """The stored form, ``<kind>:<key>``."""
        return f"{self.kind}:{self.key}"

    @classmethod
    def parse(cls, text: str) -> "Wait":
        """The wait stored as *text*.

        Raises:
            ValueError: not a wait this version knows.
        """
        kind, _, key = text.partition(":")
        if kind == "input" and key:
            return cls("input", key)
        if kind == "timer" and key:
            return cls("timer", key)
        if kind == "child" and key:
            return cls("child", key)
        raise ValueError(f"unknown wait {text!r}")

    def is_over(self, task: Task, now: datetime) -> bool:
        """True once what this wait is for has arrived in *task* (as of *now*)."""
        if self.kind == "input":
            return self.key in task.input_responses
        if self.kind == "child":
            return self.key in task.ended_children
        due = task.timers.get(self.key)
        return due is not None and due <= now

    def wakes_at(self, task: Task) -> datetime | None:
        """The time this wait ends by itself (a timer's), if any."""
        return task.timers.get(self.key) if self.kind == "timer" else None


class NodeWaits(BaseException):  # a control-flow signal, not an error
    """Raised inside a node by ``ctx.ask``/``ctx.sleep`` to end its attempt as waiting.

    A ``BaseException``, so that a node's ``except Exception`` does not swallow it.
    *question* is the request to store with the wait, *due* the timer's end.
    """

    def __init__(
        self, wait: Wait, *, question: InputRequest | None = None, due: datetime | None = None
    ) -> None:
        super().__init__(wait.encode())
        self.wait = wait
        self.question = question
        self.due = due
