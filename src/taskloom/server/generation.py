"""Which protocol generation a request speaks, and which task methods each one serves.

This is the one place that decides it. taskloom serves three generations of MCP:

- ``LEGACY``, 2025-11-25: Tasks in core. The client opts in per call with
  ``params.task``; ``tasks/get``, ``tasks/result``, ``tasks/list`` and ``tasks/cancel``;
  ``capabilities.tasks`` is announced at ``initialize``.
- ``MODERN``, 2026-07-28 (per-request envelopes, no session): the
  ``io.modelcontextprotocol/tasks`` extension, declared by each request in its ``_meta``
  client capabilities; the server decides; ``tasks/get``, ``tasks/update``,
  ``tasks/cancel`` and ``subscriptions/listen``.
- ``PLAIN``, every older handshake revision: no tasks at all; each call runs to its
  result (2025-11-25 §2.1: a receiver that announced nothing ignores ``params.task``).
"""

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

LEGACY_VERSION: Final = "2025-11-25"
"""The protocol revision whose core has Tasks (``params.task``, ``tasks/*``)."""
TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension (SEP-2663): advertised in ``server/discover`` and
declared by the client in each request's ``_meta`` client capabilities."""


class Generation(Enum):
    """A family of protocol revisions that speak tasks the same way."""

    PLAIN = "plain"
    LEGACY = "legacy"
    MODERN = "modern"

    @classmethod
    def of(cls, protocol_version: str) -> "Generation":
        """The generation of *protocol_version*: a version no ``initialize`` handshake
        reaches is modern (2026-07-28; an unknown one is refused by the SDK's modern
        path), so transport routing and task semantics agree."""
        if protocol_version == LEGACY_VERSION:
            return cls.LEGACY
        if protocol_version in HANDSHAKE_PROTOCOL_VERSIONS:
            return cls.PLAIN
        return cls.MODERN


def generation(ctx: ServerRequestContext[Any, Any]) -> Generation:
    """The generation of the request *ctx* (its negotiated or enveloped version)."""
    return Generation.of(ctx.protocol_version)


TASK_METHODS: Final[Mapping[str, frozenset[Generation]]] = MappingProxyType(
    {
        "tasks/get": frozenset({Generation.LEGACY, Generation.MODERN}),
        "tasks/cancel": frozenset({Generation.LEGACY, Generation.MODERN}),
        "tasks/result": frozenset({Generation.LEGACY}),  # removed in 2026-07-28 (MUST -32601)
        "tasks/list": frozenset({Generation.LEGACY}),
        "tasks/update": frozenset({Generation.MODERN}),
    }
)
"""The ``tasks/*`` methods and the generations that serve them (``-32601`` elsewhere)."""


def serves(method: str, speaking: Generation) -> bool:
    """Whether a request of generation *speaking* may call *method* (any non-task
    method: yes)."""
    served = TASK_METHODS.get(method)
    return served is None or speaking in served


def declares_tasks_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when *this request* declared the tasks extension (2026-07-28 only: on older
    versions the extension does not exist, whatever the client sends)."""
    if generation(ctx) is not Generation.MODERN:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return extensions is not None and TASKS_EXTENSION in extensions


def takes_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """True when the client of *ctx* said it knows tasks: on 2025-11-25 it declared
    ``capabilities.tasks`` at ``initialize``, on 2026-07-28 this request declared the
    tasks extension. Only such clients are shown output schemas (ADR 0040)."""
    speaking = generation(ctx)
    if speaking is Generation.MODERN:
        return declares_tasks_extension(ctx)
    capabilities = ctx.session.client_capabilities
    return (
        speaking is Generation.LEGACY
        and capabilities is not None
        and (capabilities.tasks is not None)
    )
