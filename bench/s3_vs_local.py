"""Benchmark: the lakehouse on S3 beside the same lakehouse on the local disk, in one run.

    .venv/bin/python bench/s3_vs_local.py [--events 1000000] [--files 10] [--rate 2000] [--seconds 120] [--trigger 5]
                                          [--skip-live]

An S3 server as `lakehouse storage up` starts it (SeaweedFS on free ports, its data under a scratch directory), then:

- **Backfill**: `--events` clickstream events landed in `--files` files, bronze -> silver -> gold_user_activity_5m run
  available-now (the jobs as the backfill runs them), once with the lakehouse on the local disk and once on S3 (the
  landing files, tables, checkpoints and state all in the bucket), in one SparkSession, after a small untimed run of
  each (the JVM's first-use costs, S3A's client included, are paid before timing). Goal: S3 at most 1.5x local.
- **Live latency**: bench/live_latency.py (bronze on a `--trigger`-second clock reading Kafka, silver and gold on their
  upstream's commits, one driver; the operating point on 2 cores (docs/benchmarks.md): 2,000 events/s, T = 5 s) with its
  lakehouse on the local disk, then on S3: produced -> silver and window end -> gold p95, over the whole run and after
  the warm-up (the first minute: each driver's first batches pay its first-use costs, as the backfill's untimed run
  does). Goal: S3 within one trigger interval of local, after the warm-up.

Prints one JSON document (the figures, the ratios, a verdict per goal).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import options  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.objectstore import server  # noqa: E402
from include.objectstore.server import free_port  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


def backfill(spark, settings, registry, events: int, files: int) -> dict:
    """Land the events, run the three jobs available-now; seconds and rows."""
    from spark_jobs.streaming_query import run_job

    landed = write_landing(settings.layout.landing("landing/clickstream"), "clickstream",
                           GeneratorConfig(events=events, seed=1, files=files))
    started = time.perf_counter()
    for job_id in JOBS:
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 1), "lines": landed.lines,
            "gold_rows": delta_store.count_rows(settings.layout.table("gold/user_activity_5m"))}


def live(root: str, env: dict, args) -> dict:
    """bench/live_latency.py with its lakehouse at `root`: its JSON result."""
    result = subprocess.run([sys.executable, str(REPO / "bench" / "live_latency.py"), "--root", root,
                             "--rate", str(args.rate), "--seconds", str(args.seconds), "--trigger", str(args.trigger)],
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise SystemExit(f"live_latency.py on {root} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout[result.stdout.index("{"):])


def main() -> None:
    parser = options(__doc__, events=1_000_000, files=10, rate=2000, seconds=120)
    parser.add_argument("--trigger", type=int, default=5,
                        help="bronze's interval, seconds (2 s saturates 2 cores at 2,000 events/s: see docs/benchmarks.md)")
    parser.add_argument("--skip-live", action="store_true", help="the backfill only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    base = load_settings()
    s3 = replace(base, root="s3://bench/lakehouse", local_dir=work / "local",
                 s3=replace(base.s3, endpoint=f"http://127.0.0.1:{free_port()}", access_key_id="bench",
                            secret_access_key=os.urandom(12).hex()))
    server.up(s3)
    env = {**os.environ, **s3.storage_environment(), "PYSPARK_PYTHON": sys.executable}
    try:
        from include.spark_session import get_spark

        registry = load_registry(base.registry_path)
        spark = get_spark(s3, app_name="lakehouse-bench-s3")  # S3A's endpoint and credentials for both runs
        for settings in (replace(base, root=work / "warm_local"), replace(s3, root="s3://bench/warm")):
            backfill(spark, settings, registry, 20_000, 2)  # untimed: first-use costs
        local = backfill(spark, replace(base, root=work / "local_lakehouse"), registry, args.events, args.files)
        on_s3 = backfill(spark, s3, registry, args.events, args.files)
        spark.stop()
        result = {"events": args.events, "files": args.files, "backfill_local": local, "backfill_s3": on_s3,
                  "backfill_ratio": round(on_s3["seconds"] / local["seconds"], 2)}
        result["backfill_goal"] = ("PASS" if result["backfill_ratio"] <= 1.5 else "FAIL") + ": S3 at most 1.5x local"
        if not args.skip_live:
            live_local = live(str(work / "live_local"), {**os.environ, "PYSPARK_PYTHON": sys.executable}, args)
            live_s3 = live("s3://bench/live", env, args)
            result |= {"live_local": live_local, "live_s3": live_s3}
            for figure in ("", "_steady"):
                for name, key in (("silver", "produced_to_silver_seconds"), ("gold", "window_end_to_gold_seconds")):
                    result[f"{name}_p95_seconds{figure}"] = {"local": live_local[key + figure]["p95"],
                                                             "s3": live_s3[key + figure]["p95"]}
            within = all(result[f"{name}_p95_seconds_steady"]["s3"] - result[f"{name}_p95_seconds_steady"]["local"]
                         <= args.trigger for name in ("silver", "gold"))  # the goal: after the warm-up
            result["live_goal"] = (f"{'PASS' if within else 'FAIL'}: S3's p95 within one trigger ({args.trigger} s) "
                                   f"of local, to silver and to gold, after the first {live_s3['warmup_seconds']} s")
        print(json.dumps(result, indent=2))
    finally:
        server.down(s3)


if __name__ == "__main__":
    main()
