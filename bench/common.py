"""Shared by the benchmarks."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def options(doc: str | None, **defaults: int) -> argparse.ArgumentParser:
    """A benchmark's command line (described by its docstring's first line): a whole-number option per default,
    in order (`files=10`: `--files`, 10)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    for name, default in defaults.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return parser


def warm_up(spark, work: Path) -> None:
    """Load the JVM's Spark and Delta classes before timing (a one-time cost of every process)."""
    path = str(work / "warm_up_delta")
    spark.range(1000).write.format("delta").mode("overwrite").save(path)
    spark.read.format("delta").load(path).count()


def good_rows(stream, job):
    """The job's output columns of a parse_json stream's good rows (what its sink table receives). observe() keeps
    the filter from being pushed below the parse, which would parse every line again for each clause."""
    from pyspark.sql import functions as F

    from spark_jobs.json_values import QUARANTINE_REASON

    if job.sink.quarantine_table:
        stream = stream.observe("lines", F.count(F.lit(1))).where(F.col(QUARANTINE_REASON).isNull())
    return stream.select(*job.output_schema)


def start(parser: argparse.ArgumentParser, prefix: str) -> tuple[argparse.Namespace, Path]:
    """The parsed command line, log lines from WARNING up, and a new scratch directory named from `prefix`."""
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    return args, Path(tempfile.mkdtemp(prefix=prefix))


def time_after_warm_up(spark, work: Path, compare: Callable[[Path, int, int], dict], events: int, files: int) -> None:
    """Load Spark's classes and run `compare` (a directory, events, files) once small, then print its result with
    `events` in `files` (:func:`finish`)."""
    warm_up(spark, work)
    compare(work / "warm_up", 20_000, 2)
    finish(spark, work, compare(work / "timed", events, files))


def finish(spark, work: Path, result: dict) -> None:
    """Print the result as JSON, stop Spark and remove the benchmark's scratch directory."""
    print(json.dumps(result, indent=2))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"  # the benchmarks' result files (not committed)


def write_result(result: dict, out: Path | None, name: str) -> Path:
    """Write `result` as JSON to `out` (default bench/results/<name>.json); its path."""
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path


def tree_cpu_seconds(pid: int | None = None) -> float:
    """CPU seconds (user + system) of process `pid` (default: this one) and of every process below it, with those of
    the children they have reaped (a Spark driver's finished Python workers, a command's ended processes)."""
    import os

    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    root = pid or os.getpid()
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return round(sum(times.get(p, 0.0) for p in tree), 2)


def load_average() -> dict[str, float]:
    """The machine's load averages (1, 5, 15 minutes) and its cores."""
    import os

    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2), "cores": os.cpu_count()}


def lakehouse(env: dict, *args: str, timeout: float = 600) -> str:
    """A `lakehouse` command with the environment `env` (a private broker's, a private chain's); its output
    (SystemExit with its end when it fails). A server it starts outlives it: not a child of the benchmark's process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "include.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode:
        raise SystemExit(f"lakehouse {' '.join(args)} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return done.stdout


def run_facts() -> dict[str, str]:
    """What a result records of its run: the command (this script and its arguments), the checkout's commit and the
    date (UTC)."""
    import subprocess
    import sys
    from datetime import UTC, datetime

    script = Path(sys.argv[0]).resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {"command": " ".join([str(script.relative_to(REPO)) if script.is_relative_to(REPO) else sys.argv[0],
                                 *sys.argv[1:]]),
            "commit": commit.stdout.strip(), "date": datetime.now(UTC).isoformat(timespec="seconds")}
