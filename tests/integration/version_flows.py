"""The source of ``vflow`` at a version, for ``taskloom serve --workflows FILE.py`` (ADR
0039): each node returns ``<version>@<pid>``, so a run's result names the code and the
process that ran each of its nodes. The middle node works ``work_s``, or, given
``until`` (a file), until the file exists: a test creates it once it has killed the
process holding the run, whatever the time that took. Version 2's input has a field
version 1's has not (``tools/list`` shows which version a server offers)."""

SOURCE = '''"""vflow version {version} (written by tests/integration/version_flows.py)."""

import os

import anyio
from pydantic import BaseModel

from taskloom import NodeContext, Workflow


class Job(BaseModel):
    n: int = 0
    work_s: float = 0.0
    until: str = ""  # a file: the middle node works until it exists (instead of work_s)
{extra}

vflow = Workflow("vflow", version="{version}", input=Job)


def _ran() -> str:
    return "{version}@" + str(os.getpid())


@vflow.node()
async def start(ctx: NodeContext[Job]) -> str:
    return _ran()


@vflow.node(deps=[start])
async def work(ctx: NodeContext[Job]) -> str:
    if ctx.input.until:  # the test creates the file once the run must go on
        while not os.path.exists(ctx.input.until):
            await anyio.sleep(0.05)
    else:
        await anyio.sleep(ctx.input.work_s)
    return _ran()


@vflow.node(deps=[start, work])
async def finish(ctx: NodeContext[Job]) -> str:
    return " ".join([ctx.output(start), ctx.output(work), _ran()])
'''

EXTRA = {"1": "", "2": "    since_2: bool = False\n"}


def source(version: str) -> str:
    """A module defining ``vflow`` at *version* (``"1"`` or ``"2"``)."""
    return SOURCE.format(version=version, extra=EXTRA[version])
