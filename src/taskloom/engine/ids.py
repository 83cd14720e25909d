"""Task ids: unguessable, URL-safe, 144 random bits."""

import base64
import os

from taskloom.engine.models import TaskId

_ID_BYTES = 18  # 144 bits, 24 URL-safe characters


def new_task_id() -> TaskId:
    """A fresh task id from the operating system's CSPRNG.

    Never one that starts with ``-``, which a command line would take for a flag (drawing
    again costs 0.02 bits of the 144).
    """
    while True:
        token = base64.urlsafe_b64encode(os.urandom(_ID_BYTES)).decode("ascii")
        if not token.startswith("-"):
            return TaskId(token)
