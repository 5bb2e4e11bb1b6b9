"""Benchmark: the same streaming query (bronze: landing JSON -> parsed rows, available-now, the registry's
backfill admission) written by the project's Delta sink (foreachBatch, idempotent Delta appends by the
executors), by Spark's own parquet file sink and by Delta's own streaming sink, in one run and one
SparkSession. The two plain sinks write the good rows only; the project's job also writes the quarantine
table, accounts for every landing file's bytes and records the batch (ledger, progress, lease). All three run once
on a small input first, untimed, so that none pays the JVM's first-use costs for the others.

    .venv/bin/python bench/delta_sink_vs_parquet.py [--events 1000000] [--files 20]
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import good_rows, options, start, time_after_warm_up  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402
from spark_jobs.transforms import build_stream  # noqa: E402

JOB = "bronze_clickstream"


def plain_sink(spark, settings, registry, sink_format: str) -> int:
    """The job's query into Spark's parquet sink or Delta's streaming sink (good rows only, as the job's table)."""
    job = registry.job(JOB)
    stream = good_rows(build_stream(spark, settings, job, available_now=True), job)
    out = settings.root / f"{sink_format}_bronze"
    query = (stream.writeStream.format(sink_format).option("path", str(out))
             .option("checkpointLocation", str(settings.root / "_checkpoints" / sink_format))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return spark.read.format(sink_format).load(str(out)).count()


def compare(spark, base, registry, root: Path, events: int, files: int) -> dict:
    """Land `events` in `files` and run the query into each sink; their timings."""
    delta, parquet = replace(base, root=root / "delta"), replace(base, root=root / "parquet")
    write_landing(delta.layout.landing("landing/clickstream"), "clickstream",
                  GeneratorConfig(events=events, seed=1, files=files))
    shutil.copytree(delta.layout.landing("landing/clickstream"), parquet.layout.landing("landing/clickstream"))

    started = time.perf_counter()
    parquet_rows = plain_sink(spark, parquet, registry, "parquet")
    parquet_seconds = time.perf_counter() - started

    started = time.perf_counter()
    own_sink_rows = plain_sink(spark, parquet, registry, "delta")
    own_sink_seconds = time.perf_counter() - started

    started = time.perf_counter()
    run_job(spark, delta, registry, JOB, Trigger(available_now=True))
    delta_seconds = time.perf_counter() - started
    return {
        "events": events, "files": files,
        "admission": vars(registry.job(JOB).source.admission(available_now=True)),
        "parquet_sink_seconds": round(parquet_seconds, 1),
        "delta_sink_seconds": round(delta_seconds, 1),
        "ratio": round(delta_seconds / parquet_seconds, 2),
        "delta_own_sink_seconds": round(own_sink_seconds, 1),
        "delta_own_sink_ratio": round(own_sink_seconds / parquet_seconds, 2),
        "rows_parquet": parquet_rows,
        "rows_delta_own_sink": own_sink_rows,
        "rows_delta": delta_store.count_rows(delta.layout.table("bronze/clickstream")),
    }


def main() -> None:
    args, work = start(options(__doc__, events=1_000_000, files=20), "lakehouse-bench-")
    base = load_settings()
    registry = load_registry(base.registry_path)
    spark = get_spark(base, app_name="lakehouse-bench")
    time_after_warm_up(spark, work, partial(compare, spark, base, registry), args.events, args.files)


if __name__ == "__main__":
    main()
