"""Benchmark: what lineage and metrics cost a backfill: the 1M-event backfill (bronze -> silver ->
gold_user_activity_5m, available-now, one driver) with each run's OpenLineage events sent to a Kafka broker
(LAKEHOUSE_LINEAGE=kafka, the default) against none (`off`), in alternating rounds on the same landed files; then the
metrics endpoint on the backfilled lakehouse: its series and a scrape's seconds. The rounds' end-to-end times
differ by seconds whatever the setting (the JVM warming, the machine): the lineage's own time inside each run (its
events built and sent, counted around JobRun) is the figure that says what it costs.

    .venv/bin/python bench/monitoring_cost.py [--events 1000000] [--files 10] [--rounds 2]

A live driver's cost of serving its Spark metrics (its UI and PrometheusServlet, LAKEHOUSE_DRIVER_METRICS) is measured
on live micro-batches by bench/live_latency.py run with LAKEHOUSE_DRIVER_METRICS=0 and =1 (docs/benchmarks.md).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, options, run_facts, start, warm_up, write_result  # noqa: E402
from include.daemons import free_port_block  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.kafka import broker  # noqa: E402
from include.lineage import emitter as emitter_module  # noqa: E402
from include.lineage.emitter import emitter  # noqa: E402
from include.ops.metrics import exposition  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


LINEAGE_SECONDS: list[float] = []  # time spent sending a run's events (JobRun's start and end), per backfill


def timed_lineage() -> None:
    """Count the seconds the drivers' lineage takes inside each run (JobRun: building and sending its events)."""
    made, ended = emitter_module.JobRun.__init__, emitter_module.JobRun.end

    def start(self, *args, **kwargs):
        began = time.perf_counter()
        made(self, *args, **kwargs)
        LINEAGE_SECONDS[-1] += time.perf_counter() - began

    def end(self, *args, **kwargs):
        began = time.perf_counter()
        ended(self, *args, **kwargs)
        LINEAGE_SECONDS[-1] += time.perf_counter() - began

    emitter_module.JobRun.__init__, emitter_module.JobRun.end = start, end


def backfill(spark, settings, registry, landing: Path) -> float:
    """The three jobs available-now on a fresh root holding `landing`'s files; seconds."""
    shutil.copytree(landing, settings.layout.landing("landing/clickstream"))
    LINEAGE_SECONDS.append(0.0)
    started = time.perf_counter()
    for job_id in JOBS:
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    return time.perf_counter() - started


def scrape(settings) -> dict:
    """The metrics endpoint's answer on the lakehouse: series, and seconds of a first and of a next scrape."""
    started = time.perf_counter()
    text = exposition(settings)
    first = time.perf_counter() - started
    started = time.perf_counter()
    exposition(settings)
    return {"series": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
            "first_scrape_seconds": round(first, 2), "next_scrape_seconds": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = options(__doc__, events=1_000_000, files=10, rounds=2)
    args, work = start(parser, "lakehouse-bench-monitoring-")
    base = replace(load_settings(), root=work / "first", driver_metrics=False)
    registry = load_registry(base.registry_path)
    port = free_port_block([0, 1])
    broker_home = Path(tempfile.mkdtemp(prefix="lakehouse-bench-broker-"))  # outlives `work`, which finish removes
    kafka = replace(base, kafka_bootstrap=f"127.0.0.1:{port}", kafka_bootstrap_set=True)
    broker.up(replace(kafka, local_dir=broker_home), kafka.kafka_bootstrap)
    try:
        spark = get_spark(base, app_name="lakehouse-bench")
        warm_up(spark, work)
        landing = work / "landing"
        write_landing(landing, "clickstream", GeneratorConfig(events=args.events, seed=1, files=args.files))
        small = work / "small"
        write_landing(small, "clickstream", GeneratorConfig(events=20_000, seed=2, files=2))
        backfill(spark, replace(base, root=work / "warm", lineage="off"), registry, small)  # first-use costs
        timed_lineage()
        seconds: dict[str, list[float]] = {"off": [], "kafka": []}
        inside: list[float] = []  # the lineage's own seconds in each backfill with lineage on
        for round_ in range(args.rounds):
            for mode in (("off", "kafka") if round_ % 2 == 0 else ("kafka", "off")):
                settings = replace(kafka, root=work / f"{mode}-{round_}", lineage=mode, lineage_topic="bench.lineage")
                seconds[mode].append(round(backfill(spark, settings, registry, landing), 1))
                if mode == "kafka":
                    inside.append(round(LINEAGE_SECONDS[-1], 3))
        emitter(replace(kafka, lineage="kafka", lineage_topic="bench.lineage")).flush()
        off, on = statistics.mean(seconds["off"]), statistics.mean(seconds["kafka"])
        result = {**run_facts(), "events": args.events, "files": args.files, "rounds": args.rounds,
                  "backfill_seconds_lineage_off": seconds["off"], "backfill_seconds_lineage_kafka": seconds["kafka"],
                  "end_to_end_difference_percent": round(100 * (on - off) / off, 1),
                  "lineage_seconds_inside_runs": inside,
                  "lineage_cost_percent": round(100 * max(inside) / off, 2),
                  "metrics_endpoint": scrape(replace(kafka, root=work / "off-0", lineage="off"))}
        write_result(result, None, "monitoring_cost")
        finish(spark, work, result)
    finally:
        broker.down(replace(kafka, local_dir=broker_home))
        shutil.rmtree(broker_home, ignore_errors=True)


if __name__ == "__main__":
    main()
