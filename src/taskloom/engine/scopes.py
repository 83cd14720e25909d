"""What a principal may do: the scopes of an access token (ADR 0028).

A token with no scope may do everything its principal may. Scopes only narrow:

- ``read``: read-only; the principal lists, inspects and reads the results of its tasks
  but creates, cancels and answers none.
- ``workflows:NAME[,NAME...]``: only these workflows are listed and callable (several
  such scopes add up).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

READ: Final = "read"
WORKFLOWS_PREFIX: Final = "workflows:"


@dataclass(frozen=True)
class Scopes:
    """The parsed scopes of a token: which workflows (``None``: all), and read-only."""

    workflows: frozenset[str] | None = None
    read_only: bool = False

    @classmethod
    def parse(cls, items: Iterable[str]) -> "Scopes":
        """Scopes from their written form (``read``, ``workflows:a,b``).

        Raises:
            ValueError: an unknown scope, or ``workflows:`` naming no workflow.
        """
        workflows: set[str] | None = None
        read_only = False
        for item in items:
            scope = item.strip()
            if scope == READ:
                read_only = True
            elif scope.startswith(WORKFLOWS_PREFIX):
                names = {name.strip() for name in scope[len(WORKFLOWS_PREFIX) :].split(",")}
                names.discard("")
                if not names:
                    raise ValueError(f"scope {scope!r} names no workflow: workflows:NAME[,NAME]")
                workflows = (workflows or set()) | names
            else:
                raise ValueError(
                    f"unknown scope {scope!r}: use {READ!r} or '{WORKFLOWS_PREFIX}NAME[,NAME]'"
                )
        return cls(frozenset(workflows) if workflows is not None else None, read_only)

    @property
    def unrestricted(self) -> bool:
        """Whether these scopes allow everything."""
        return self.workflows is None and not self.read_only

    def sees(self, workflow: str) -> bool:
        """Whether *workflow* is listed and callable (read-only aside)."""
        return self.workflows is None or workflow in self.workflows

    def written(self) -> list[str]:
        """The scopes in their written form, in a stable order (``parse`` reads it back)."""
        items = [READ] if self.read_only else []
        if self.workflows is not None:
            items.append(WORKFLOWS_PREFIX + ",".join(sorted(self.workflows)))
        return items


EVERYTHING: Final = Scopes()


@dataclass(frozen=True)
class Grant:
    """Who a request acts for, and what it may do."""

    principal: str
    scopes: Scopes = EVERYTHING
