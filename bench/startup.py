"""Start-up of the ``taskloom`` command: import time, ``--help``, listings, first answer.

Each figure is the wall time of a fresh process (``python -m taskloom ...``), median of
several runs:

- ``import taskloom.cli`` (``python -c``, minus a bare ``python -c pass``);
- ``taskloom --help``, ``taskloom tasks list`` and ``taskloom workflows list`` on an
  empty SQLite database;
- ``taskloom serve`` over stdio: from spawning the process until the answer to
  ``initialize`` is read.

``python bench/startup.py --baseline SRC`` measures another checkout's ``src`` folder too
(put first on ``PYTHONPATH``), round by round with this one, for before/after ratios.
"""

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import figures

Row = figures.Row
SRC: Final = Path(__file__).resolve().parent.parent / "src"
INITIALIZE: Final = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def _env(src: Path) -> dict[str, str]:
    """The environment of a measured process: *src* first on ``PYTHONPATH``, and bytecode
    written (``PYTHONDONTWRITEBYTECODE`` dropped), so that the warm-up compiles taskloom's
    modules once, as installing it does, and the runs read them compiled like the SDK's:
    with the variable set, every run compiled them again (90 ms of a stdio ``serve``'s
    first answer on the team's 2-core machine)."""
    env = {**os.environ, "PYTHONPATH": str(src), "TASKLOOM_LOG_LEVEL": "warning"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall(command: Sequence[str], src: Path) -> float:
    """Seconds from spawning *command* until it exits (it must succeed)."""
    started = time.perf_counter()
    subprocess.run(command, env=_env(src), check=True, capture_output=True, timeout=60)
    return time.perf_counter() - started


def first_answer(src: Path, db: Path, timeout_s: float = 60.0) -> float:
    """Seconds from spawning ``taskloom serve`` until its answer to ``initialize``."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "serve", "--db", str(db)],
        env=_env(src),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                raise TimeoutError(f"no answer to initialize within {timeout_s:g} s")
        line = process.stdout.readline()
        elapsed = time.perf_counter() - started
        if b'"result"' not in line:
            raise RuntimeError(f"unexpected answer to initialize: {line[:200]!r}")
        return elapsed
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def measures(folder: Path) -> dict[str, Callable[[Path], float]]:
    """The figures, each a function of the ``src`` folder to run."""
    db = folder / "bench.db"
    python = [sys.executable]
    taskloom = [*python, "-m", "taskloom"]
    return {
        "import taskloom.cli": lambda src: (
            _wall([*python, "-c", "import taskloom.cli"], src) - _wall([*python, "-c", "0"], src)
        ),
        "taskloom --help": lambda src: _wall([*taskloom, "--help"], src),
        "taskloom tasks list": lambda src: _wall(
            [*taskloom, "tasks", "list", "--db", str(db)], src
        ),
        "taskloom workflows list": lambda src: _wall([*taskloom, "workflows", "list"], src),
        "taskloom serve: first answer (stdio)": lambda src: first_answer(src, db),
        "python -c 'import mcp' (the SDK alone)": lambda src: _wall(
            [*python, "-c", "import mcp"], src
        ),
    }


def compare(sources: dict[str, Path], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Seconds by figure and by source: in each round every figure of every source, so
    figures of one round (``serve`` and ``import mcp``) saw the same load."""
    found: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        db = str(Path(folder) / "bench.db")
        _wall([sys.executable, "-m", "taskloom", "db", "migrate", "--db", db], SRC)
        chosen = measures(Path(folder))
        for measure in chosen.values():
            for src in sources.values():
                measure(src)  # warm the OS's file cache and the bytecode cache
        for _ in range(rounds):  # every figure once per round, so rounds pair up
            for name, measure in chosen.items():
                by_source = found.setdefault(name, {label: [] for label in sources})
                for label, src in sources.items():
                    by_source[label].append(measure(src))
    return found


HELP: Final = "taskloom --help"
SERVE: Final = "taskloom serve: first answer (stdio)"
SDK: Final = "python -c 'import mcp' (the SDK alone)"
HELP_TARGET_MS: Final = 250
SERVE_TARGET_RATIO: Final = 1.1


def run(quick: bool) -> list[Row]:
    """The start-up figures of this checkout, in milliseconds; targets (issue 25):
    ``--help`` within 0.25 s, ``serve``'s first answer within 1.1x ``import mcp``."""
    found = compare({"now": SRC}, rounds=1 if quick else 7)
    rows = [
        figures.row(name, [1000 * value for value in by_source["now"]], "ms")
        for name, by_source in found.items()
    ]
    for row in rows:
        if row["benchmark"] == HELP:
            row["target"], row["passed"] = f"<= {HELP_TARGET_MS}", row["median"] <= HELP_TARGET_MS
        if row["benchmark"] == SERVE:
            ratios = [
                serve / sdk
                for serve, sdk in zip(found[SERVE]["now"], found[SDK]["now"], strict=True)
            ]
            ratio = statistics.median(ratios)
            row["note"] = f"{ratio:.2f}x `import mcp` (paired by round)"
            row["target"] = f"<= {SERVE_TARGET_RATIO}x import mcp"
            row["passed"] = ratio <= SERVE_TARGET_RATIO
    rows[-1]["note"] = f"load average {Path('/proc/loadavg').read_text().split()[0]} (1 min)"
    return rows


def main(argv: list[str] | None = None) -> None:
    """Print the figures, with ``--baseline SRC`` side by side with another checkout's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    sources = {"now": SRC} if args.baseline is None else {"before": args.baseline, "now": SRC}
    found = compare(sources, args.rounds)
    print("| figure | " + " | ".join(sources) + (" | ratio |" if len(sources) > 1 else ""))
    for name, by_source in found.items():
        medians = {
            label: figures.row(name, values, "s")["median"] for label, values in by_source.items()
        }
        cells = " | ".join(f"{1000 * value:.0f} ms" for value in medians.values())
        ratio = f" | {medians['now'] / medians['before']:.2f}x |" if len(sources) > 1 else ""
        print(f"| {name} | {cells}{ratio}")


if __name__ == "__main__":
    main()
