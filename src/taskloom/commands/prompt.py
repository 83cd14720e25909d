"""Answering a task's questions at the terminal while following it.

A question whose schema is one boolean field takes ``y`` or ``n``; any other takes JSON.
A wrong answer is explained and asked again; end of input leaves the question for
``taskloom tasks answer``.
"""

import json
import sys
from typing import Any, Final

import anyio

from taskloom.commands.progress_view import ProgressView
from taskloom.engine.errors import InvalidAnswerError, TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest

_YES: Final = frozenset({"y", "yes", "true"})
_NO: Final = frozenset({"n", "no", "false"})


def yes_no_field(schema: dict[str, Any]) -> str | None:
    """The field of a schema that has exactly one field, a boolean; else ``None``."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    ((name, field),) = properties.items()
    return name if isinstance(field, dict) and field.get("type") == "boolean" else None


def parse_answer(text: str, schema: dict[str, Any]) -> Any:
    """*text* as the answer: ``y``/``n`` for a yes-or-no question, otherwise JSON.

    Raises:
        ValueError: the text is neither.
    """
    field = yes_no_field(schema)
    word = text.strip().lower()
    if field is not None and word in _YES | _NO:
        return {field: word in _YES}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        hint = "y or n" if field is not None else "JSON"
        raise ValueError(f"please answer with {hint}") from None


class Prompter:
    """Asks each pending question of one task once, one question at a time."""

    def __init__(
        self, manager: TaskManager, task_id: str, view: ProgressView, flags: str = ""
    ) -> None:
        self._flags = flags
        """Added to the command it prints (``--db ...``), so it works when copied."""
        self._manager = manager
        self._task_id = task_id
        self._view = view
        self._asked: set[str] = set()
        self._lock = anyio.Lock()

    def new_questions(self, requests: dict[str, InputRequest]) -> list[str]:
        """Keys of questions not asked yet (they are marked as asked)."""
        fresh = [key for key in requests if key not in self._asked]
        self._asked.update(fresh)
        return fresh

    async def ask(self, key: str, request: InputRequest) -> None:
        """Ask at the terminal until a valid answer is given, or input ends."""
        schema = dict(request.requested_schema)
        hint = "y/n" if yes_no_field(schema) else f"JSON matching {json.dumps(schema)}"
        async with self._lock:
            self._view.pause(f"The task asks: {request.message}")
            try:
                await self._answer(key, schema, hint)
            finally:
                self._view.resume()

    async def _answer(self, key: str, schema: dict[str, Any], hint: str) -> None:
        while True:
            text = await _read_line(f"  answer ({hint}): ")
            if text is None:
                self._view.note(
                    f"  no answer; give one with: taskloom tasks answer {self._task_id} JSON"
                    f"{self._flags}"
                )
                return
            try:
                value = parse_answer(text, schema)
                await self._manager.provide_input(self._task_id, key, value)
            except (ValueError, InvalidAnswerError) as error:
                self._view.note(f"  {error}")
                continue
            except TaskloomError:
                return  # answered elsewhere, or the task ended: the drawing shows it
            self._view.note("  answered")
            return


async def _read_line(prompt: str) -> str | None:
    """A line from the terminal, waited for on the event loop (a cancel stops the wait;
    no thread is left blocked on the terminal); ``None`` at end of input."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    await anyio.wait_readable(sys.stdin)
    line = sys.stdin.readline()  # a terminal hands over whole lines
    return line.rstrip("\n") if line else None
