"""scripts/ensure-chromium.sh: a no-op when the browser is there (it never fails)."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-chromium.sh"


def test_a_browser_already_there_is_left_alone() -> None:
    done = subprocess.run(
        [str(SCRIPT)],
        env={**os.environ, "TASKLOOM_CHROMIUM": "/bin/sh"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
