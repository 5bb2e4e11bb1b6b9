"""Benchmark: moving a checkpoint's state to another partition count (`lakehouse checkpoint repartition`)
against rebuilding the job (`lakehouse checkpoint full-refresh`), on the same 1M-event history of
gold_user_activity_5m, in one run and one SparkSession (both actions run once on a tiny history first, so
neither pays for loading classes). The state store commits as the registry says (`changelog_checkpointing`).

    .venv/bin/python bench/repartition_vs_full_refresh.py [--events 1000000] [--files 10]
"""

from __future__ import annotations

import copy
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, options, start  # noqa: E402
from include.checkpoints.request import CheckpointRequest  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.registry import Trigger, build_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.checkpoint_actions import apply  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")
JOB = "gold_user_activity_5m"


def main() -> None:
    args, work = start(options(__doc__, events=1_000_000, files=10), "lakehouse-bench-")
    base = load_settings()
    raw = yaml.safe_load(base.registry_path.read_text())
    registry = build_registry(raw)
    moved = copy.deepcopy(raw)
    moved["jobs"][JOB]["state_store"] = {"shuffle_partitions": 2}
    repartitioned = build_registry(moved)
    history, rebuilt = replace(base, root=work / "repartition"), replace(base, root=work / "full_refresh")
    write_landing(history.layout.landing("landing/clickstream"), "clickstream",
                  GeneratorConfig(events=args.events, seed=1, files=args.files))
    spark = get_spark(base, app_name="lakehouse-bench")
    warm = replace(base, root=work / "warm_up")  # both actions once on a tiny history: JVM classes loaded
    write_landing(warm.layout.landing("landing/clickstream"), "clickstream",
                  GeneratorConfig(events=2000, seed=2, files=2))
    for job_id in JOBS:
        run_job(spark, warm, registry, job_id, Trigger(available_now=True))
    apply(spark, warm, repartitioned, CheckpointRequest("repartition", (JOB,), actor="bench"))
    apply(spark, warm, repartitioned, CheckpointRequest("full-refresh", (JOB,), actor="bench"))
    for job_id in JOBS:
        run_job(spark, history, registry, job_id, Trigger(available_now=True))
    shutil.copytree(history.root, rebuilt.root)

    started = time.perf_counter()
    apply(spark, history, repartitioned, CheckpointRequest("repartition", (JOB,), actor="bench"))
    repartition_seconds = time.perf_counter() - started

    started = time.perf_counter()
    apply(spark, rebuilt, registry, CheckpointRequest("full-refresh", (JOB,), actor="bench"))
    full_refresh_seconds = time.perf_counter() - started

    result = {
        "events": args.events, "files": args.files,
        "repartition_seconds": round(repartition_seconds, 1),
        "full_refresh_seconds": round(full_refresh_seconds, 1),
        "speedup": round(full_refresh_seconds / repartition_seconds, 1),
        "gold_rows": delta_store.count_rows(rebuilt.layout.table("gold/user_activity_5m")),
    }
    finish(spark, work, result)


if __name__ == "__main__":
    main()
