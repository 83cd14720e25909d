"""What telling a principal costs a request (issue 15, ADRs 0028 and 0033).

One process, SQLite (``synchronous=FULL``). The HTTP endpoint's ``Authenticator`` is
asked for the grant of an ``Authorization`` header, one request after another:

- a static token (``TASKLOOM_TOKENS``) in a table of 2, and of 100 (the table is
  scanned in constant time per entry, so its cost grows with its size);
- a stored token (``taskloom tokens create``) among 10,000 in the database: a
  primary-key read of its row on every request (no cache, so revocation holds from the
  next request);
- a stored token with a wrong secret, and a token nobody issued (both refused).

Then the quota check at create: tasks created by ``submit`` with and without
``max_unfinished`` while their owner already has 900 unfinished tasks (a count of the
owner's active tasks before each create).

Target: at least 1,000 stored-token lookups a second (a lookup must not be what limits
a request; the default rate limit is 600 requests a minute per principal).
"""

import random
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import anyio
from pydantic import BaseModel

import figures
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.scopes import Grant
from taskloom.engine.submit import submit
from taskloom.engine.tokens import TokenVerifier, mint
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.server.http.authentication import Authenticator
from taskloom.server.http.settings import HttpSettings
from taskloom.testing import FakeClock

Row = figures.Row
STORED: Final = 10_000
UNFINISHED: Final = 900


class Empty(BaseModel):
    pass


idle = Workflow("bench-idle", version="1", input=Empty)


@idle.node()
async def nothing(ctx: NodeContext[Empty]) -> None:
    return None


def _static(count: int) -> dict[str, str]:
    return {f"static-token-{n:06d}-padding": f"user{n}" for n in range(count)}


async def _lookups_per_s(authenticator: Authenticator, headers: list[str], ok: bool) -> float:
    started = time.perf_counter()
    for header in headers:
        found = await authenticator.grant(header)
        if isinstance(found, Grant) != ok:
            raise RuntimeError(f"unexpected answer to a lookup: {found!r}")
    return len(headers) / (time.perf_counter() - started)


async def _measure(path: Path, quick: bool) -> dict[str, list[float]]:
    stored, lookups, rounds = (100, 200, 2) if quick else (STORED, 2_000, 5)
    clock = FakeClock(datetime(2026, 11, 24, tzinfo=UTC))
    found: dict[str, list[float]] = {}
    async with SqliteTaskStore.open(path) as store:
        tokens = []
        for n in range(stored):
            token, record = mint(f"user{n % 100}", now=clock.now())
            await store.add_token(record)
            tokens.append(token)
        verifier = TokenVerifier(store, clock)
        small = Authenticator(HttpSettings(tokens=_static(2)), verifier)
        large = Authenticator(HttpSettings(tokens=_static(100)), verifier)
        static_header = ["Bearer static-token-000001-padding"] * lookups
        wrong = [f"Bearer {token[:-4]}AAAA" for token in tokens]
        cases = {
            "static token (2 configured)": (small, static_header, True),
            "static token (100 configured)": (large, static_header, True),
            f"stored token (among {stored:,})": (small, [f"Bearer {t}" for t in tokens], True),
            "stored token, wrong secret (refused)": (small, wrong, False),
            "token nobody issued (refused)": (small, ["Bearer tl_000000000000_x"] * lookups, False),
        }
        for name, (authenticator, headers, ok) in cases.items():
            found[name] = [
                await _lookups_per_s(authenticator, random.sample(headers * 2, lookups), ok)
                for _ in range(rounds)
            ]
        manager = TaskManager(store, clock=clock)
        unfinished = 20 if quick else UNFINISHED
        for _ in range(unfinished):
            await submit(manager, idle, owner="ann")
        creates = 50 if quick else 300
        for label, quota in (("without", None), ("with", 1_000_000)):
            name = f"create, {label} the quota check ({unfinished} unfinished)"
            found[name] = []
            for _ in range(rounds):
                started = time.perf_counter()
                for _ in range(creates):
                    await submit(manager, idle, owner="ann", max_unfinished=quota)
                found[name].append(creates / (time.perf_counter() - started))
    return found


def run(quick: bool) -> list[Row]:
    """The benchmark rows (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        measured = anyio.run(_measure, Path(folder) / "tokens.db", quick)
    rows = []
    for name, values in measured.items():
        unit = "creates/s" if name.startswith("create") else "lookups/s"
        target = ">= 1000" if name.startswith("stored token (") else None
        rows.append(figures.row(name, values, unit, target))
    with_quota, without = rows[-1]["median"], rows[-2]["median"]
    rows[-1]["note"] = f"{with_quota / without:.2f}x the creates without it"
    return rows


if __name__ == "__main__":
    from run import render

    print(render(run(quick=False)))
