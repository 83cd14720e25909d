"""JSON Schema checks for answers to input requests (the engine's SchemaValidator).

``jsonschema`` is imported by the first check, not with this module: most commands open
an engine and never check an answer.
"""

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from pydantic import JsonValue

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


class JsonSchemaValidator:
    """Validates values with the ``jsonschema`` package (draft 2020-12)."""

    def problems(self, schema: Mapping[str, JsonValue], value: JsonValue) -> list[str]:
        """Reasons why *value* does not match *schema*; empty when it does."""
        from jsonschema.exceptions import SchemaError

        try:
            validator = _validator(json.dumps(schema, sort_keys=True))
        except SchemaError as error:
            return [f"the requested schema itself is invalid: {error.message}"]
        return [
            f"{'/'.join(str(part) for part in error.absolute_path) or 'answer'}: {error.message}"
            for error in validator.iter_errors(value)
        ]


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> "Draft202012Validator":
    from jsonschema import Draft202012Validator

    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
