"""Benchmark: a 1M-event backfill (bronze -> silver -> gold_user_activity_5m, available-now streaming)
against an equivalent Spark batch job on the same input, in one run and one SparkSession.

    .venv/bin/python bench/backfill_vs_batch.py [--events 1000000] [--files 10] [--state-provider hdfs]

The batch job applies the same transforms (parse + quarantine split, dropDuplicates, 5-minute windows)
to the whole input at once and writes the same Delta tables natively (delta-spark, executors write).
A third run measures the floor of any streaming backfill on this stack: the same three streaming queries
(`build_stream`, same admission and state store) into Delta's own streaming sink, with none of the
project's work around them (no quarantine table, file accounting, batch ledger, lease or progress log).
All three run once on a small input first, untimed, so that none pays the JVM's first-use costs (class
loading, JIT) for the others.
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
from include.registry import Registry, Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.batch_writer import routes  # noqa: E402
from spark_jobs.query_session import configure_session  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402
from spark_jobs.transforms import build_stream, parse_json, window_aggregate  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


def batch_pipeline(spark, settings, registry, landing: Path) -> None:
    bronze_job, silver_job, gold_job = (registry.job(j) for j in JOBS)
    configure_session(spark, gold_job, gold_job.state_store.shuffle_partitions)

    def write(frame, table: str) -> None:
        frame.write.format("delta").mode("append").save(str(settings.layout.table(table)))

    def read(table: str):
        return spark.read.format("delta").load(str(settings.layout.table(table)))

    parsed = parse_json(spark.read.format("text").load(str(landing)), bronze_job).persist()
    for table, rows in routes(bronze_job, parsed):
        write(rows, table)
    parsed.unpersist()
    write(read("bronze/clickstream").dropDuplicates(list(silver_job.transform.keys)), "silver/clickstream")
    write(window_aggregate(read("silver/clickstream"), gold_job), "gold/user_activity_5m")


def bare_streaming(spark, settings, registry) -> None:
    """The jobs' own queries, available-now, into Delta's streaming sink: bronze keeps the good rows only."""
    for job_id in JOBS:
        job = registry.job(job_id)
        configure_session(spark, job, job.state_store.shuffle_partitions, Trigger(available_now=True))
        (good_rows(build_stream(spark, settings, job, available_now=True), job).writeStream.format("delta").outputMode(job.sink.mode)
         .option("checkpointLocation", str(settings.layout.checkpoint(job.id)))
         .trigger(availableNow=True).start(str(settings.layout.table(job.sink.table))).awaitTermination())


def with_state_provider(registry: Registry, provider: str) -> Registry:
    """The registry with every job's state in `provider`."""
    jobs = {job_id: replace(job, state_store=replace(job.state_store, provider=provider))
            for job_id, job in registry.jobs.items()}
    return replace(registry, jobs=jobs)


def compare(spark, base, registry, root: Path, events: int, files: int) -> dict:
    """Land `events` in `files`, run the streaming backfill and the batch job on them; their timings."""
    streaming, batch = replace(base, root=root / "streaming"), replace(base, root=root / "batch")
    bare = replace(base, root=root / "bare")
    started = time.perf_counter()
    landed = write_landing(streaming.layout.landing("landing/clickstream"), "clickstream",
                           GeneratorConfig(events=events, seed=1, files=files))
    generate_seconds = time.perf_counter() - started
    for other in (batch, bare):
        shutil.copytree(streaming.layout.landing("landing/clickstream"), other.layout.landing("landing/clickstream"))

    started = time.perf_counter()
    for job_id in JOBS:
        run_job(spark, streaming, registry, job_id, Trigger(available_now=True))
    streaming_seconds = time.perf_counter() - started

    started = time.perf_counter()
    batch_pipeline(spark, batch, registry, batch.layout.landing("landing/clickstream"))
    batch_seconds = time.perf_counter() - started

    started = time.perf_counter()
    bare_streaming(spark, bare, registry)
    bare_seconds = time.perf_counter() - started
    return {
        "events": events, "lines": landed.lines, "files": files,
        "generate_seconds": round(generate_seconds, 1),
        "streaming_backfill_seconds": round(streaming_seconds, 1),
        "batch_seconds": round(batch_seconds, 1),
        "ratio": round(streaming_seconds / batch_seconds, 2),
        "bare_streaming_seconds": round(bare_seconds, 1),
        "bare_ratio": round(bare_seconds / batch_seconds, 2),
        "gold_rows_streaming": delta_store.count_rows(streaming.layout.table("gold/user_activity_5m")),
        "gold_rows_batch": delta_store.count_rows(batch.layout.table("gold/user_activity_5m")),
        "gold_rows_bare": delta_store.count_rows(bare.layout.table("gold/user_activity_5m")),
    }


def main() -> None:
    parser = options(__doc__, events=1_000_000, files=10)
    parser.add_argument("--state-provider", choices=("rocksdb", "hdfs"),
                        help="the streaming jobs' state store (default: the registry's)")
    args, work = start(parser, "lakehouse-bench-")
    base = load_settings()
    registry = load_registry(base.registry_path)
    if args.state_provider:
        registry = with_state_provider(registry, args.state_provider)
    spark = get_spark(base, app_name="lakehouse-bench")
    time_after_warm_up(spark, work, partial(compare, spark, base, registry), args.events, args.files)


if __name__ == "__main__":
    main()
