"""``taskloom serve``: the workflows as MCP tools over stdio, or Streamable HTTP with
``--http``, until stdin closes or SIGINT or SIGTERM (its flags: the setting table)."""

import logging
import signal
import sys
from typing import TYPE_CHECKING

import anyio

from taskloom.commands.base import EXIT_OK
from taskloom.commands.common import operator_settings, workflow_modules
from taskloom.commands.options import setup_logging
from taskloom.commands.serve_settings import http_settings, server_settings
from taskloom.commands.setting import Values
from taskloom.commands.setting_table import (
    DB,
    LOG_FORMAT,
    LOG_LEVEL,
    OPERATOR_SETTINGS,
    STORE_WAIT_S,
    WORKFLOWS,
)
from taskloom.config import BUILTIN_WORKFLOWS, TaskloomSettings
from taskloom.persistence.factory import database_settings

if TYPE_CHECKING:
    from taskloom.server.http import HttpSettings

logger = logging.getLogger("taskloom.serve")


async def serve(values: Values) -> int:
    """Serve until stopped (see :func:`serve_until_stopped`)."""
    settings, http = process_settings(values)
    setup_logging(values.given(LOG_FORMAT), values.given(LOG_LEVEL))
    await serve_until_stopped(settings, http, text=values.given(LOG_FORMAT) == "text")
    return EXIT_OK


def process_settings(values: Values) -> "tuple[TaskloomSettings, HttpSettings | None]":
    """The settings the flags ask for: the process's, and HTTP's (``None``: stdio)."""
    http = http_settings(values)
    settings = TaskloomSettings(
        database=database_settings(values.given(DB), store_wait_s=values.of(STORE_WAIT_S)),
        workflow_modules=(*BUILTIN_WORKFLOWS, *workflow_modules(values.of(WORKFLOWS) or ())),
        workflow_settings=operator_settings(values.of(OPERATOR_SETTINGS)),
        server=server_settings(values),
        exposure="network" if http is not None else "local",
        freeze_start_up=True,  # the process is taskloom's (ADR 0061)
    )
    return settings, http


async def serve_until_stopped(
    settings: TaskloomSettings, http: "HttpSettings | None", text: bool = True
) -> None:
    """Serve stdio (until stdin closes) or HTTP, until SIGINT or SIGTERM: then the engine
    stops, and the runs in flight are handed back to resume from their checkpoints. Where
    it serves, and why it stops, are lines on stderr (*text*) or INFO log records."""
    from taskloom.bootstrap import serve_http, serve_stdio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as group:

            async def stop_on_signal() -> None:
                async for received in signals:
                    name = signal.Signals(received).name
                    _say(text, f"taskloom: {name}: stopping; runs in flight resume elsewhere")
                    group.cancel_scope.cancel()
                    return

            group.start_soon(stop_on_signal)
            if http is None:
                if sys.stdin.isatty():  # a person, not a host: say it is not hung
                    _say(
                        text,
                        "taskloom: serving MCP over stdio, waiting for a host on stdin"
                        " (Ctrl-C stops)",
                    )
                await serve_stdio(settings)
            else:
                port = await group.start(serve_http, settings, http)
                url = http.model_copy(update={"port": port}).url
                _say(text, f"taskloom: serving MCP at {url} (Ctrl-C stops)")
                await anyio.sleep_forever()
            group.cancel_scope.cancel()  # stdin closed


def _say(text: bool, line: str) -> None:
    if text:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    else:
        logger.info(line.removeprefix("taskloom: "))
