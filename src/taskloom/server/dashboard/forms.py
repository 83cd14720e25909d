"""The form of a pending question, made from its JSON schema, and the answer a submitted
form stands for (checked afterwards by the engine, as every answer is).

A schema of an object with flat properties (what MCP elicitation allows) gets one field
per property: a text box (``string``), a number box (``number``, ``integer``), a
checkbox (``boolean``), a list (``enum``). Any other schema gets one JSON text area.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import JsonValue

JSON_FIELD: Final = "answer_json"


@dataclass(frozen=True)
class Field:
    """One input of the form."""

    name: str
    label: str
    kind: str
    """``text``, ``number``, ``integer``, ``checkbox``, ``select`` or ``json``."""
    required: bool
    help: str = ""
    choices: tuple[str, ...] = ()
    default: str = ""


def fields(schema: Mapping[str, JsonValue]) -> tuple[Field, ...]:
    """The inputs of the form that answers a question asking for *schema*."""
    properties = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(properties, dict):
        return (Field(JSON_FIELD, "Answer (JSON)", "json", True, _text(schema.get("description"))),)
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    found = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = _kind(spec)
        if kind == "json":
            return (Field(JSON_FIELD, "Answer (JSON)", "json", True),)
        enum = spec.get("enum")
        found.append(
            Field(
                name=name,
                label=_text(spec.get("title")) or name,
                kind=kind,
                required=name in needed,
                help=_text(spec.get("description")),
                choices=tuple(str(each) for each in enum) if isinstance(enum, list) else (),
                default="" if spec.get("default") is None else str(spec.get("default")),
            )
        )
    return tuple(found)


def answer(schema: Mapping[str, JsonValue], form: Mapping[str, str]) -> JsonValue:
    """The answer a submitted *form* gives (values that do not parse stay text, so the
    schema check names them)."""
    inputs = fields(schema)
    if inputs and inputs[0].kind == "json":
        raw = form.get(JSON_FIELD, "")
        try:
            value: JsonValue = json.loads(raw)
        except ValueError:
            return raw
        return value
    result: dict[str, JsonValue] = {}
    for field in inputs:
        if field.kind == "checkbox":
            result[field.name] = field.name in form
            continue
        raw = form.get(field.name, "")
        if raw == "" and not field.required:
            continue
        result[field.name] = _parsed(field.kind, raw)
    return result


def _parsed(kind: str, raw: str) -> JsonValue:
    try:
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
    except ValueError:
        return raw
    return raw


def _kind(spec: Mapping[str, Any]) -> str:
    if isinstance(spec.get("enum"), list):
        return "select"
    return {
        "string": "text",
        "number": "number",
        "integer": "integer",
        "boolean": "checkbox",
    }.get(str(spec.get("type")), "json")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
