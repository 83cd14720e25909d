"""Stable error fingerprints: the same cause gives the same short hash across runs."""

import hashlib
import re
from typing import Final

from taskloom.engine.runs import ErrorInfo

_VOLATILE: Final = re.compile(r"0x[0-9a-fA-F]+|\d+")
_MAX_MESSAGE: Final = 2_000


def fingerprint(*parts: str) -> str:
    """16 hex digits that group errors with the same parts once numbers are masked."""
    normalised = "\x1f".join(_VOLATILE.sub("#", part) for part in parts)
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:16]


def describe(
    error: BaseException | None, *, workflow: str, node: str, timeout_s: float | None
) -> ErrorInfo:
    """The stored form of a node failure (``None`` stands for a timeout)."""
    if error is None:
        error_type, message = "TimeoutError", f"timed out after {timeout_s:g} s"
    else:
        error_type = type(error).__qualname__
        message = str(error)[:_MAX_MESSAGE] or error_type
    return ErrorInfo(
        error_type=error_type,
        message=message,
        fingerprint=fingerprint(workflow, node, error_type, message),
    )
