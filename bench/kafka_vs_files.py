"""Benchmark: an available-now backfill of the same records from Kafka and from landing files, same jobs.

    .venv/bin/python bench/kafka_vs_files.py [--events 1000000] [--partitions 6]

The clickstream generator's records are written as landing files and produced, one message per line, to a topic
of a broker this script starts (`lakehouse kafka up`'s code, on free ports) and stops. bronze_clickstream, then
silver_clickstream, run available-now on each input, in one SparkSession; the Kafka run reads a registry whose
clickstream source is the topic. Reports seconds per job and input, and the rows (which must agree).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, options, start, warm_up  # noqa: E402
from include.generator import GeneratorConfig, generate, write_landing  # noqa: E402
from include.kafka import broker  # noqa: E402
from include.kafka.broker import free_port_pair  # noqa: E402
from include.kafka.produce import ensure_topic, produce_lines  # noqa: E402
from include.registry import Trigger, build_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream")


def kafka_registry(raw: dict, topic: str) -> dict:
    raw["sources"]["clickstream"] = {**{k: v for k, v in raw["sources"]["clickstream"].items() if k != "path"},
                                     "kafka": {"topic": topic}}
    raw["jobs"]["bronze_clickstream"]["source"] = {"kafka": "clickstream", "max_offsets_per_trigger": 10000,
                                                   "backfill": {"max_offsets_per_trigger": 10_000_000}}
    return raw


def backfill(spark, settings, registry) -> dict:
    seconds = {}
    for job_id in JOBS:
        started = time.perf_counter()
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
        seconds[job_id] = round(time.perf_counter() - started, 1)
    rows = {t: delta_store.count_rows(settings.layout.table(t))
            for t in ("bronze/clickstream", "bronze/clickstream_quarantine", "silver/clickstream")}
    return {"seconds": seconds, "rows": rows}


def main() -> None:
    args, work = start(options(__doc__, events=1_000_000, partitions=6), "bench-kafka-")
    base = load_settings()
    raw = yaml.safe_load(base.registry_path.read_text())
    bootstrap = f"127.0.0.1:{free_port_pair()}"
    kafka_settings = replace(base, root=work / "kafka", kafka_bootstrap=bootstrap, kafka_bootstrap_set=True)
    files_settings = replace(base, root=work / "files")
    broker.up(kafka_settings, bootstrap)
    try:
        config = GeneratorConfig(events=args.events, seed=1, files=20)
        write_landing(files_settings.layout.landing("landing/clickstream"), "clickstream", config)
        lines, _ = generate("clickstream", config)
        ensure_topic(bootstrap, "clickstream", args.partitions)
        started = time.perf_counter()
        produce_lines(bootstrap, "clickstream", lines, "user_id")
        produced_seconds = round(time.perf_counter() - started, 1)

        spark = get_spark(replace(base, root=work / "spark"), app_name="bench-kafka-vs-files")
        warm_up(spark, work)
        result = {
            "events": args.events, "lines": len(lines), "partitions": args.partitions,
            "produce_seconds": produced_seconds,
            "files": backfill(spark, files_settings, build_registry(yaml.safe_load(yaml.safe_dump(raw)))),
            "kafka": backfill(spark, kafka_settings, build_registry(kafka_registry(raw, "clickstream"))),
        }
        assert result["files"]["rows"] == result["kafka"]["rows"], result
        finish(spark, work, result)
    finally:
        broker.down(kafka_settings)


if __name__ == "__main__":
    main()
