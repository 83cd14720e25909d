"""A live page names what it shows: its events URL carries ``seen``, the digest of the
stored state it was rendered from, and each fragment of its live region the digest of
its own (``X-Taskloom-Seen``). The clock alone changes no page's digest, even while a
node runs and the timeline's bars move with it."""

import html
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

from taskloom.engine.runs import AttemptOutcome, NodeEnd, NodeStart, NodeState
from taskloom.engine.states import TaskState
from taskloom.server.dashboard.seen import HEADER
from tests.dashboard.support import Site, site


def _events(page: str) -> tuple[str, dict[str, list[str]]]:
    """The live region's events URL: its path and its query."""
    found = re.search(r'id="live" data-events="([^"]+)"', page)
    assert found is not None, page
    url = urlsplit(html.unescape(found.group(1)))
    return url.path, parse_qs(url.query)


def _seen(page: str) -> str:
    [seen] = _events(page)[1]["seen"]
    return seen


def _widths(page: str) -> list[str]:
    return re.findall(r'<g class="attempt [^"]*">.*?<rect [^>]*width="([^"]+)"', page, re.DOTALL)


async def _two_attempts(shown: Site) -> str:
    """A running task: node a ran 2 s, node b runs (its bar ends now)."""
    task = await shown.manager.create("job", owner="ann")
    [claimed] = await shown.manager.claim(
        worker="w", workflows=frozenset({"job"}), lease_for=timedelta(hours=1), limit=1
    )
    runs, clock = shown.runs, shown.clock
    await runs.start_node(claimed.lease, NodeStart(node="a", attempt=1), clock.now())
    clock.advance(2)
    ended = NodeEnd(
        node="a", attempt=1, outcome=AttemptOutcome.COMPLETED, state=NodeState.COMPLETED
    )
    await runs.end_node(claimed.lease, ended, clock.now())
    await runs.start_node(claimed.lease, NodeStart(node="b", attempt=1), clock.now())
    return task.id


async def test_a_task_page_names_what_it_shows_whatever_the_time() -> None:
    async with site() as shown:
        task_id = await _two_attempts(shown)
        page = (await shown.page(f"/ui/tasks/{task_id}")).text
        assert _events(page)[0] == f"/ui/tasks/{task_id}/events"
        seen = _seen(page)
        fragment = await shown.page(f"/ui/tasks/{task_id}?fragment=1")
        assert fragment.headers[HEADER] == seen
        shown.clock.advance(30)  # b's bar grows, a's shrinks: nothing stored changed
        later = (await shown.page(f"/ui/tasks/{task_id}")).text
        assert _widths(later) != _widths(page)
        assert len(_widths(later)) == 2
        assert _seen(later) == seen
        await shown.manager.report_progress(task_id, completed=1, total=2, message="half")
        changed = (await shown.page(f"/ui/tasks/{task_id}")).text
        assert _seen(changed) != seen
        fragment = await shown.page(f"/ui/tasks/{task_id}?fragment=1")
        assert fragment.headers[HEADER] == _seen(changed)


async def test_the_list_names_what_it_shows_beside_its_filters() -> None:
    async with site() as shown:
        await shown.manager.create("job", owner="ann")
        page = (await shown.page("/ui/?state=queued")).text
        path, query = _events(page)
        assert (path, query["state"]) == ("/ui/events", ["queued"])
        seen = _seen(page)
        fragment = await shown.page("/ui/?state=queued&fragment=1")
        assert fragment.headers[HEADER] == seen
        shown.clock.advance(3600)
        assert _seen((await shown.page("/ui/?state=queued")).text) == seen
        await shown.manager.create("job", owner="bob")  # not ann's: not on her page
        assert _seen((await shown.page("/ui/?state=queued")).text) == seen
        await shown.manager.create("job", owner="ann")
        changed = (await shown.page("/ui/?state=queued")).text
        assert _seen(changed) != seen
        fragment = await shown.page("/ui/?state=queued&fragment=1")
        assert fragment.headers[HEADER] == _seen(changed)
        other = (await shown.page(f"/ui/?state={TaskState.RUNNING}")).text
        assert _seen(other) != _seen(changed)  # another filter shows other rows
