"""The claim rule (:class:`taskloom.engine.claims.ClaimRule`) rendered as SQL, once for
both SQL stores: a condition on ``tasks t LEFT JOIN leases l`` with named parameters.

The caller binds ``now`` itself (each store has its own time representation); every
other parameter comes with the condition.
"""

from typing import Final

from taskloom.engine.claims import ANY_VERSION, ClaimRule
from taskloom.engine.states import ACTIVE_STATES
from taskloom.persistence.sql.dialect import POSTGRES, SQLITE, Dialect

__all__ = ["ACTIVE", "POSTGRES", "SQLITE", "Dialect", "claimable"]


ACTIVE: Final = tuple(sorted(state.value for state in ACTIVE_STATES))
"""The active states' values, in one order for every statement that names them."""
_ACTIVE: Final = ", ".join(f"'{state}'" for state in ACTIVE)


def claimable(rule: ClaimRule, dialect: Dialect) -> tuple[str, dict[str, object]]:
    """The SQL condition true for exactly the rows :meth:`ClaimRule.admits` admits, and
    its parameters (``now`` excepted)."""
    p = dialect.parameter
    parameters: dict[str, object] = {"reclaim": rule.reclaim_from}
    condition = (
        f"t.state IN ({_ACTIVE})"
        f" AND (t.expires_at IS NULL OR t.expires_at > {p('now')})"
        f" AND {_loaded(rule, dialect, parameters)}"
        f" AND (l.task_id IS NULL OR l.expires_at <= {p('now')} OR l.worker = {p('reclaim')})"
        f" AND (NOT t.parked OR t.wake_at <= {p('now')})"
    )
    return condition, parameters


def _loaded(rule: ClaimRule, dialect: Dialect, parameters: dict[str, object]) -> str:
    """``has_version``: the task's (name, recorded version) is loaded."""
    p, version = dialect.parameter, dialect.recorded_version
    each: list[str] = []
    for index, (name, versions) in enumerate(sorted(rule.workflows.items())):
        parameters[f"w{index}"] = name
        if versions is ANY_VERSION:
            each.append(f"t.name = {p(f'w{index}')}")
            continue
        placeholders = []
        for number, value in enumerate(sorted(versions)):
            parameters[f"w{index}v{number}"] = value
            placeholders.append(p(f"w{index}v{number}"))
        each.append(
            f"(t.name = {p(f'w{index}')}"
            f" AND ({version} IS NULL OR {version} IN ({', '.join(placeholders)})))"
        )
    return f"({' OR '.join(each)})" if each else "FALSE"
