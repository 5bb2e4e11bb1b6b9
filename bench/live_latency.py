"""Benchmark: end-to-end latency of live jobs reading Kafka, from a message's production to its row in silver and
to the finalized window in gold.

    .venv/bin/python bench/live_latency.py [--rate 2000] [--seconds 120] [--trigger 2] [--downstream on-upstream-commit]
                                           [--gold-trigger T] [--separate] [--live-jit tiered|c1] [--warmup 60]
                                           [--root PATH|URI]

A broker (`lakehouse kafka up`'s code, on free ports) and three live jobs in one driver (`lakehouse run --group
latency`; `--separate`: a process each, `lakehouse run <job> --trigger <its live trigger>`). Bronze's live trigger is `processing-time=--trigger`;
silver and gold run on their upstream's commits (`--downstream on-upstream-commit`, the default), or on clocks of
their own (`--downstream processing-time`: `--trigger`, the gold job's `--gold-trigger`, default the same, admitting
twice the silver commits of its interval): bronze_clickstream reading the topic `clickstream`, silver_clickstream
(dedup within a 10-second watermark) and gold_user_activity_5m with 10-second windows (watermark 5 s), from a copy
of the registry. A producer sends clickstream events stamped with the time they are produced, at `--rate` events
per second for `--seconds` (batching up to 50 ms, `linger.ms`, as a service producing that many would: the broker
shares the 2 cores with the driver here, and 5 ms batches cost it a third of a core). Latencies come from the tables: silver rows carry the message's Kafka timestamp
(`_kafka_timestamp`) and Delta's change data feed gives each row's commit time; a gold window is final when its
row is committed, measured from the window's end (the earliest it could be final: the watermark delay is part of
the figure). Reports p50 / p95 / p99 against the target (silver p95 within twice bronze's trigger interval + 2 s),
the rate silver sustained (also `_steady`: over the messages produced, and the windows ending, after the first
`--warmup` seconds, when the drivers' first-use costs are paid), and what bounds them: each job's batch durations against its batch interval (batches
longer than it run back to back, and a message waits for the batches before it) and the machine's load while the
producer ran.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from include.kafka import broker  # noqa: E402
from include.kafka.produce import ensure_topic  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


def bench_registry(base: Path, path: Path, triggers: dict[str, str], live_jit: str) -> None:
    raw = yaml.safe_load(base.read_text())
    raw["jobs"] = {job: {**raw["jobs"][job], "group": "latency",
                         "triggers": {**raw["jobs"][job].get("triggers", {}), "live": triggers[job]}} for job in JOBS}
    raw.pop("groups", None)
    raw["defaults"]["resources"] = {**raw["defaults"].get("resources", {}), "live_jit": live_jit}
    raw["sources"] = {"clickstream": {**{k: v for k, v in raw["sources"]["clickstream"].items() if k != "path"},
                                      "kafka": {"topic": "clickstream", "starting_offsets": "earliest"}}}
    raw["jobs"]["bronze_clickstream"]["source"] = {"kafka": "clickstream", "max_offsets_per_trigger": 200000}
    raw["jobs"]["silver_clickstream"]["source"]["watermark"] = "10 seconds"
    gold = raw["jobs"]["gold_user_activity_5m"]
    # silver commits at most once per trigger: a gold trigger k times as long must admit k commits, twice for headroom
    every = {job: Trigger.parse(text).interval_seconds or 1 for job, text in triggers.items()}  # following: 1 commit
    gold["source"]["max_files_per_trigger"] = 2 * -(-every[JOBS[-1]] // every[JOBS[1]])
    gold["source"]["watermark"] = "5 seconds"
    gold["transform"]["window"] = "10 seconds"
    gold["sink"]["properties"] = {**gold["sink"].get("properties", {}), "delta.enableChangeDataFeed": "true"}
    gold.pop("quality", None)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def produce(bootstrap: str, rate: int, seconds: int, produced: list[int]) -> None:
    """Events stamped with now, at `rate` per second; `produced` gets the count."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all"})
    users = [f"u{n:03d}" for n in range(200)]
    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            user = random.choice(users)
            event = {"event_id": uuid.uuid4().hex, "user_id": user, "event_type": "click", "value": 1.0,
                     "event_time": datetime.now(UTC).isoformat()}
            producer.produce("clickstream", json.dumps(event).encode(), key=user.encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(60)
    produced.append(sent)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = (lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)) if ordered else (lambda q: None)
    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "count": len(ordered)}


def batch_durations(settings, intervals: dict[str, int]) -> dict[str, dict]:
    """Per job, from `_ops/query_progress`: batches with input, their duration p50 / p95 / p99 (seconds), and how many
    took longer than the job's batch interval (Registry.live_interval_seconds: a job on its upstream's commits, its
    upstream's)."""
    from include.records.query_progress import PROGRESS_TABLE
    from include.storage import delta as delta_store

    rows = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
    result = {}
    for job in JOBS:
        seconds = [r["batch_duration_ms"] / 1000 for r in rows if r["job"] == job and r["num_input_rows"]]
        result[job] = {**percentiles(seconds), "over_the_interval": sum(1 for d in seconds if d > intervals[job])}
    return result


def utc(moment: datetime) -> datetime:
    """Delta's change feed gives commit times without a zone: they are UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def changes(table):
    import pyarrow as pa

    from include.storage import delta as delta_store

    return pa.table(delta_store.open_table(table).load_cdf(starting_version=0).read_all()).to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--trigger", type=int, default=2, help="bronze's processing-time trigger interval, seconds")
    parser.add_argument("--downstream", choices=("on-upstream-commit", "processing-time"), default="on-upstream-commit",
                        help="silver's and gold's live triggers: their upstream's commits (default), or processing-time "
                             "intervals of their own (--trigger, --gold-trigger)")
    parser.add_argument("--gold-trigger", type=int, default=None,
                        help="with --downstream processing-time: the gold job's trigger interval, seconds (default: "
                             "--trigger)")
    parser.add_argument("--separate", action="store_true", help="a driver per job instead of one for the three")
    parser.add_argument("--live-jit", choices=("tiered", "c1"), default="tiered",
                        help="the group's `resources.live_jit` (default tiered: C2 pays for itself at thousands of "
                             "events a second)")
    parser.add_argument("--warmup", type=int, default=60,
                        help="seconds of production after which the steady-state figures begin (a started driver's first "
                             "batches pay its first-use costs: code compiled, clients and state stores opened)")
    parser.add_argument("--root", default=None,
                        help="the lakehouse: a local path or an S3 URI (default: a new scratch directory)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    bootstrap = f"127.0.0.1:{broker.free_port_pair()}"
    env = {**os.environ, "LAKEHOUSE_ROOT": args.root or str(work / "lakehouse"), "LAKEHOUSE_LOCAL_DIR": str(work), "LAKEHOUSE_REGISTRY": str(work / "jobs.yaml"),
           "LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap, "PYSPARK_PYTHON": sys.executable, "LAKEHOUSE_LOG_LEVEL": "WARNING"}
    if args.downstream == "on-upstream-commit":
        triggers = {JOBS[0]: f"processing-time={args.trigger} seconds"} | dict.fromkeys(JOBS[1:], args.downstream)
    else:
        triggers = {job: f"processing-time={args.trigger} seconds" for job in JOBS} | {
            JOBS[-1]: f"processing-time={args.gold_trigger or args.trigger} seconds"}
    bench_registry(load_settings().registry_path, work / "jobs.yaml", triggers, args.live_jit)
    os.environ.update({k: env[k] for k in ("LAKEHOUSE_ROOT", "LAKEHOUSE_REGISTRY", "LAKEHOUSE_KAFKA_BOOTSTRAP",
                                           "LAKEHOUSE_LOCAL_DIR")})
    settings = load_settings()
    registry = load_registry(settings.registry_path)
    broker.up(settings, bootstrap)
    jobs = []
    try:
        ensure_topic(bootstrap, "clickstream", 4)
        # alone, a job runs its backfill trigger unless told otherwise
        for name, run in ([(job, [job, "--trigger", triggers[job]]) for job in JOBS] if args.separate
                          else [("latency", ["--group", "latency"])]):
            log = (work / f"{name}.log").open("w")
            jobs.append(subprocess.Popen([sys.executable, "-m", "include.cli", "run", *run],
                                         env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        silver = settings.layout.table("silver/clickstream")
        deadline = time.monotonic() + 300  # the three drivers start (their first, empty batches)
        while not all((settings.layout.heartbeat(job)).exists() for job in JOBS) or not (silver / "_delta_log").is_dir():
            if time.monotonic() > deadline or any(p.poll() is not None for p in jobs):
                raise SystemExit(f"the live jobs did not start; logs in {work}")
            time.sleep(1)
        time.sleep(3 * args.trigger)
        produced: list[int] = []
        producer = threading.Thread(target=produce, args=(bootstrap, args.rate, args.seconds, produced))
        started = time.monotonic()
        steady_from = datetime.now(UTC) + timedelta(seconds=args.warmup)
        producer.start()
        loads = [os.getloadavg()[0]]
        while producer.is_alive():
            producer.join(10)
            loads.append(os.getloadavg()[0])
        deadline = time.monotonic() + 180
        from include.storage import delta as delta_store

        while delta_store.count_rows(silver) < produced[0] and time.monotonic() < deadline:
            time.sleep(1)
        caught_up = time.monotonic() - started
        time.sleep(20)  # the last windows: 10 s long, final 5 s after their end, plus a trigger or two
    finally:
        for process in jobs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in jobs:
            process.wait(timeout=180)
        broker.down(settings)
    silver_rows = [r for r in changes(settings.layout.table("silver/clickstream")) if r["_change_type"] == "insert"]
    silver_latency = [(utc(r["_kafka_timestamp"]), (utc(r["_commit_timestamp"]) - utc(r["_kafka_timestamp"])).total_seconds())
                      for r in silver_rows]
    gold_rows = [r for r in changes(settings.layout.table("gold/user_activity_5m")) if r["_change_type"] == "insert"]
    gold_latency = [(utc(r["window_end"]), (utc(r["_commit_timestamp"]) - utc(r["window_end"])).total_seconds())
                    for r in gold_rows]
    print(json.dumps({
        "drivers": "a driver per job" if args.separate else "one driver (group)",
        "rate_target": args.rate, "seconds": args.seconds, "triggers": triggers, "live_jit": args.live_jit,
        "produced": produced[0],
        "silver_rows": len(silver_rows), "silver_caught_up_after_seconds": round(caught_up, 1),
        "silver_rate_sustained": round(len(silver_rows) / caught_up, 1),
        "produced_to_silver_seconds": percentiles([s for _, s in silver_latency]),
        "window_end_to_gold_seconds": percentiles([s for _, s in gold_latency]),
        "warmup_seconds": args.warmup,  # the same, for messages produced (windows ending) after the warm-up
        "produced_to_silver_seconds_steady": percentiles([s for at, s in silver_latency if at >= steady_from]),
        "window_end_to_gold_seconds_steady": percentiles([s for at, s in gold_latency if at >= steady_from]),
        "silver_p95_target_seconds": 2 * args.trigger + 2,
        "batch_seconds_with_input": batch_durations(settings, {j: registry.live_interval_seconds(j) for j in JOBS}),
        "load_average_while_producing": {"median": round(statistics.median(loads), 1), "max": round(max(loads), 1),
                                         "cores": os.cpu_count()},
        "work": str(work),
    }, indent=2))


if __name__ == "__main__":
    main()
