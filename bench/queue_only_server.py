"""taskloom's MCP server with its worker switched off: tasks are created, never run.

A diagnostic next to ``taskloom serve``: the same durable ``tools/call`` path (validate,
commit the task, answer the ``CreateTaskResult``) without the engine running each
trivial task in the same process, so the bench can tell the cost of a durable create
from the cost of executing the task. Run: ``python bench/queue_only_server.py DB``
(with ``bench/`` on ``PYTHONPATH``, for the ``flows`` module).
"""

import sys
from pathlib import Path

import anyio

from taskloom.bootstrap import open_engine
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import TaskServer


async def main(path: Path) -> None:
    settings = TaskloomSettings(
        database=SqliteSettings(path=path),
        workflow_modules=(*BUILTIN_WORKFLOWS, "flows"),
        run_worker=False,
        freeze_start_up=True,  # it stands for `taskloom serve`, which freezes
    )
    async with open_engine(settings) as engine:
        server = TaskServer(engine.manager, engine.workflows, settings.server, runs=engine.runs)
        await server.serve_stdio()


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]))
