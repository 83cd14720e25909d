"""Keep the metrics of workflow versions no live process has up to date (ADR 0039)."""

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio

from taskloom.engine.claims import WorkflowKey
from taskloom.engine.errors import StoreUnavailableError
from taskloom.engine.ports import Clock
from taskloom.engine.versions import VersionStore, version_report

if TYPE_CHECKING:
    from taskloom.observability.metrics import Metrics  # prometheus_client: when served

logger = logging.getLogger(__name__)

EVERY_S = 15.0
"""How often the store is asked (one grouped read of the unfinished runs)."""


async def watch_versions(
    metrics: "Metrics",
    store: object,
    clock: Clock,
    loaded: Iterable[WorkflowKey] = (),
    every_s: float = EVERY_S,
) -> None:
    """Every *every_s*, set ``taskloom_runs_waiting_for_a_version`` and its age from the
    store's records, until cancelled; a store that keeps no versions is not watched, and
    a failed read is logged and tried again."""
    if not isinstance(store, VersionStore):
        return
    here = frozenset(loaded)
    while True:
        try:
            now = clock.now()
            live = await store.live_versions(now)
            stored = await store.unfinished_versions(now)
            metrics.versions_seen(version_report(here, live, stored), now)
        except Exception as error:  # noqa: BLE001  # never fatal: the next period tries again
            level = logging.DEBUG if isinstance(error, StoreUnavailableError) else logging.WARNING
            # an outage is the store's one WARNING and one INFO, not a line a period (ADR 0038)
            logger.log(level, "reading the workflow versions for the metrics failed: %s", error)
        await anyio.sleep(every_s)
