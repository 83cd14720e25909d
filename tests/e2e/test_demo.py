"""`make demo` runs `examples/demo/demo.py`: run it here too (quick), so it cannot rot."""

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import checkout_env

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "demo.py"


def _rows(out: str, section: str) -> dict[str, str]:
    """The node table printed after *section*: node name -> the rest of its row."""
    part = out.split(section, 1)[1]
    rows: dict[str, str] = {}
    for line in part.splitlines():
        found = re.match(r"^   (plan|lane_\d|report)\s+(.*)$", line)
        if found:
            rows.setdefault(found.group(1), " ".join(found.group(2).split()))
        if len(rows) == 6:
            break
    return rows


def test_the_demo_audits_cancels_and_survives_a_kill(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(DEMO), "--quick"],
        cwd=tmp_path,
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Traceback" not in out + result.stderr
    assert "Server started (pid" in out
    assert "countdown, repo_audit, command_matrix" in out

    files = re.search(r"files\s+(\d+) \(", out)
    assert files is not None
    assert int(files.group(1)) > 20  # this project's src/
    assert re.search(r"languages\s+Python \d+", out)
    report = re.search(r"report\s+(\S+report\.md)", out)
    assert report is not None
    assert Path(report.group(1)).read_text().startswith("#")
    assert "100%  completed" in out  # the progress bar reached its end

    assert "the task is now cancelled" in out, out
    cancelled = _rows(out, "tasks/cancel while it said")
    assert cancelled["plan"] == "completed 1 completed"
    assert all(cancelled[f"lane_{i}"] == "stopped by the cancel 1 cancelled" for i in range(4)), out
    assert cancelled["report"] == "never started 0 -"

    assert re.search(
        r"killed the server \(pid \d+\) with SIGKILL while it said \"phase 2/3", out
    ), out
    assert "tasks/result: {'counted': 24, 'lanes': 4}" in out
    resumed = _rows(out, "Attempts per node")
    assert resumed["plan"] == "completed 1 completed"  # not run again after the restart
    assert all(resumed[f"lane_{i}"] == "completed 2 interrupted, completed" for i in range(4)), out
    assert resumed["report"] == "completed 1 completed"

    log = (tmp_path / "demo-data" / "server.log").read_text()
    assert "Traceback" not in log
    assert (tmp_path / "demo-data" / "taskloom.db").is_file()
