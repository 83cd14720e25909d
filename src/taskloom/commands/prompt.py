"""Answering a task's questions at the terminal while following it: a form.

A question whose schema is an object of flat fields (what MCP elicitation allows) is asked
one field at a time, with rich's prompts: each field's label, type, choices and default
are shown, never the schema itself; a boolean takes ``y``, ``yes``, ``n``, ``no``,
``true`` or ``false``; an optional field is skipped with an empty line. Any other schema
takes JSON (or ``@FILE``, a file of JSON). The dashboard draws the same fields
(:func:`taskloom.server.dashboard.forms.fields`). A wrong answer is explained and asked
again; end of input leaves the question for ``taskloom tasks answer``.
"""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from taskloom.commands.progress_view import ProgressView
from taskloom.engine.errors import InvalidAnswerError, TaskloomError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest
from taskloom.server.dashboard.forms import Field, fields

if TYPE_CHECKING:
    from rich.console import Console
    from rich.prompt import PromptBase

_YES: Final = frozenset({"y", "yes", "true"})
_NO: Final = frozenset({"n", "no", "false"})
_KINDS: Final = {
    "text": "text",
    "number": "number",
    "integer": "whole number",
    "checkbox": "yes/no",
    "select": "one of",
    "json": "JSON or @FILE",
}


class _EndOfInput(Exception):
    """The terminal's input ended before the form was filled."""


def yes_no_field(schema: dict[str, Any]) -> str | None:
    """The field of a schema that has exactly one field, a boolean; else ``None``."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    ((name, field),) = properties.items()
    return name if isinstance(field, dict) and field.get("type") == "boolean" else None


def parse_answer(text: str, schema: dict[str, Any]) -> Any:
    """*text* as a whole answer: ``y``/``yes``/``n``/``no`` for a yes-or-no question,
    otherwise JSON, or ``@FILE`` of JSON.

    Raises:
        ValueError: the text is neither.
    """
    field = yes_no_field(schema)
    word = text.strip().lower()
    if field is not None and word in _YES | _NO:
        return {field: word in _YES}
    return _json(text, "y or n" if field is not None else "JSON or @FILE")


def _json(text: str, hint: str = "JSON or @FILE") -> Any:
    text = text.strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).expanduser().read_text(encoding="utf-8")
        except OSError as error:
            raise ValueError(f"cannot read {text[1:]}: {error.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"please answer with {hint}") from None


def label(field: Field) -> str:
    """How a field is asked: its label, its type and whether it may be left empty."""
    kind = _KINDS.get(field.kind, field.kind)  # a list's choices follow, from rich
    need = "" if field.required or field.kind == "checkbox" else ", optional"
    return f"  {field.label} ({kind}{need})"


def prompt_for(field: Field, console: "Console") -> "PromptBase[Any]":
    """The rich prompt that asks *field*."""
    from rich.prompt import Confirm, FloatPrompt, IntPrompt, InvalidResponse, Prompt

    class YesNo(Confirm):
        """A confirmation that also takes ``yes``, ``no``, ``true`` and ``false``."""

        def process_response(self, value: str) -> bool:
            word = value.strip().lower()
            if word not in _YES | _NO:
                raise InvalidResponse("[prompt.invalid]Please answer y or n (yes or no)")
            return word in _YES

    text = label(field)
    if field.kind == "checkbox":
        return YesNo(text, console=console)
    if field.kind == "integer":
        return IntPrompt(text, console=console)
    if field.kind == "number":
        return FloatPrompt(text, console=console)
    if field.kind == "select":
        return Prompt(text, console=console, choices=list(field.choices))
    return Prompt(text, console=console)


def default_of(field: Field) -> Any:
    """The value an empty line gives *field*: its default, ``no`` for an optional boolean,
    else nothing (``...``: an optional field is then left out, a required one asked again)."""
    if field.kind == "checkbox" and (field.default or not field.required):
        return field.default == "True"
    if field.default == "":
        return ...
    if field.kind == "integer":
        return int(field.default) if field.default.lstrip("-").isdigit() else ...
    if field.kind == "number":
        try:
            return float(field.default)
        except ValueError:
            return ...
    return field.default


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
        async with self._lock:
            self._view.pause(f"The task asks: {request.message}")
            try:
                await self._answer(key, schema)
            finally:
                self._view.resume()

    async def _answer(self, key: str, schema: dict[str, Any]) -> None:
        from rich.console import Console

        console = Console(highlight=False)
        form = fields(schema)
        while True:
            try:
                value = await _fill(form, schema, console)
            except _EndOfInput:
                self._view.note(
                    f"  no answer; give one with: taskloom tasks answer {self._task_id}"
                    f" JSON|@FILE{self._flags}"
                )
                return
            try:
                await self._manager.provide_input(self._task_id, key, value)
            except InvalidAnswerError as error:
                self._view.note(f"  {error}")
                continue
            except TaskloomError:
                return  # answered elsewhere, or the task ended: the drawing shows it
            self._view.note("  answered")
            return


async def _fill(form: tuple[Field, ...], schema: dict[str, Any], console: "Console") -> Any:
    """The answer the person gives, field by field (a JSON field takes the whole answer).

    Raises:
        _EndOfInput: input ended.
    """
    from rich.prompt import InvalidResponse
    from rich.text import Text

    if len(form) == 1 and form[0].kind == "json":
        while True:
            text = await _read_line(console, Text(f"{label(form[0])}: "))
            try:
                return parse_answer(text, schema)
            except ValueError as error:
                console.print(f"  {error}", markup=False)
    answer: dict[str, Any] = {}
    for field in form:
        prompt = prompt_for(field, console)
        default = default_of(field)
        while True:
            text = await _read_line(console, prompt.make_prompt(default))
            if text.strip() == "":
                if default is not ...:
                    answer[field.name] = default
                    break
                if not field.required:
                    break
                console.print("  [prompt.invalid]this field is required")
                continue
            try:
                answer[field.name] = prompt.process_response(text)
            except InvalidResponse as error:
                prompt.on_validate_error(text, error)
                continue
            break
    return answer


async def _read_line(console: "Console", prompt: Any) -> str:
    """A line from the terminal after *prompt*, waited for on the event loop (a cancel
    stops the wait; no thread is left blocked on the terminal).

    Raises:
        _EndOfInput: at end of input.
    """
    console.print(prompt, end="")
    console.file.flush()
    await anyio.wait_readable(sys.stdin)
    line = sys.stdin.readline()  # a terminal hands over whole lines
    if not line:
        console.print()
        raise _EndOfInput
    return line.rstrip("\n")
