"""The dashboard's "Workflow versions" section (ADR 0039): each version this server
serves, a live worker has, or stored runs need, for a viewer who sees every owner."""

from taskloom.engine.manager import ANY_OWNER
from taskloom.engine.registry import loaded_versions
from taskloom.engine.versions import VersionLine, VersionStore, version_report
from taskloom.server.dashboard.access import Viewer
from taskloom.server.dashboard.context import Dashboard


async def versions_shown(dashboard: Dashboard, viewer: Viewer) -> list[VersionLine]:
    """The versions section of the task list: empty for a viewer who sees only some
    owners' tasks (the counts span every owner), or a store that keeps no versions."""
    store = dashboard.runs
    if viewer.owner is not ANY_OWNER or not isinstance(store, VersionStore):
        return []
    now = dashboard.manager.clock.now()
    live = await store.live_versions(now)
    stored = await store.unfinished_versions(now)
    return version_report(loaded_versions(dashboard.workflows), live, stored)
