"""A run's shape, stored with its task (ADR 0042): its phases, its nodes in order with their
dependencies, and which nodes are maps with how many items, so the CLI and the dashboard
draw a run without its workflow's module."""

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class NodeShape(BaseModel):
    """One node of a run as drawn: its phase, what it needs, and whether it is a map."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    phase: str
    deps: tuple[str, ...] = ()
    is_map: bool = False
    items: int | None = Field(default=None, ge=0)
    """A map's item count, once it has expanded (``None`` before)."""


class RunShape(BaseModel):
    """The nodes of a run in a dependency order, and its phases in running order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phases: tuple[str, ...]
    nodes: tuple[NodeShape, ...]

    def by_name(self) -> dict[str, NodeShape]:
        """Every node by name."""
        return {node.name: node for node in self.nodes}

    def in_phase(self, phase: str) -> list[str]:
        """The names of *phase*'s nodes, in order."""
        return [node.name for node in self.nodes if node.phase == phase]

    def with_items(self, planned: Mapping[str, int]) -> "RunShape":
        """This shape with the item counts of the maps in *planned* (unchanged if equal)."""
        if all(node.items == planned.get(node.name, node.items) for node in self.nodes):
            return self
        return RunShape(
            phases=self.phases,
            nodes=tuple(
                node.model_copy(update={"items": planned[node.name]})
                if node.name in planned
                else node
                for node in self.nodes
            ),
        )
