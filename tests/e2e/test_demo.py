"""`make demo` runs `python -m taskloom.demo`: run it here too, so it cannot rot."""

import subprocess
import sys
from pathlib import Path


def test_the_demo_runs_end_to_end_in_a_fresh_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "taskloom.demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "same idempotency key, same arguments -> same task: True" in out
    assert "its late completion is refused" in out
    assert "everything committed is still there" in out
    assert "purged 1 expired task(s)" in out
    assert "Traceback" not in out + result.stderr
    assert (tmp_path / "demo-data" / "taskloom.db").is_file()
