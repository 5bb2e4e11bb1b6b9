"""Benchmark: what reading tables costs the commands that read them: `lakehouse summary` and `lakehouse quality run
--full` (every gold table's suites over all its rows) on a lakehouse the demo built, each a fresh process, timed
wall-clock (median of the repeats).

    .venv/bin/python bench/reader_cost.py --root DIR [--repeats 3]

DIR holds a lakehouse (`LAKEHOUSE_ROOT=DIR lakehouse demo` makes one). Run it from two checkouts (the code before
and after a change of include/storage/reader.py) on the same DIR to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {"summary": ["summary"], "quality run --full": ["quality", "run", "--full"]}


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "include.cli", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True)
    if done.returncode not in (0, 1):  # quality exits 1 when an expectation fails: still a full read
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = {**os.environ, "LAKEHOUSE_ROOT": str(args.root.resolve())}
    result = {"code": str(REPO), "root": str(args.root)}
    for name, argv in COMMANDS.items():
        seconds = [timed(argv, env) for _ in range(args.repeats)]
        result[name] = {"median_s": round(statistics.median(seconds), 2), "runs_s": [round(s, 2) for s in seconds]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
