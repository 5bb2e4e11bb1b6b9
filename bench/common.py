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
