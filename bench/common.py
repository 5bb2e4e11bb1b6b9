"""Shared by the benchmarks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def warm_up(spark, work: Path) -> None:
    """Load the JVM's Spark and Delta classes before timing (a one-time cost of every process)."""
    path = str(work / "warm_up_delta")
    spark.range(1000).write.format("delta").mode("overwrite").save(path)
    spark.read.format("delta").load(path).count()


def good_rows(stream, job):
    """The job's output columns of a parse_json stream's good rows (what its sink table receives). observe() keeps
    the filter from being pushed below the parse, which would parse every line again for each clause."""
    from pyspark.sql import functions as F

    from spark_jobs.transforms import QUARANTINE_REASON

    if job.sink.quarantine_table:
        stream = stream.observe("lines", F.count(F.lit(1))).where(F.col(QUARANTINE_REASON).isNull())
    return stream.select(*job.output_schema)


def finish(spark, work: Path, result: dict) -> None:
    """Print the result as JSON, stop Spark and remove the benchmark's scratch directory."""
    print(json.dumps(result, indent=2))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
