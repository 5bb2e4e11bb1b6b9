"""Benchmark: a catch-up of many small landing files (one line each) by the bronze job, available-now,
with the registry's backfill admission (by bytes) against admission by the live limit (files).

    .venv/bin/python bench/small_files_catch_up.py [--files 5000] [--compare]

Reports seconds, micro-batches and the data files bronze holds afterwards. `--compare` also runs the
live admission (`max_files_per_trigger`) on the same input: slow by design (one batch per 2 files).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, warm_up  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

JOB = "bronze_clickstream"


def catch_up(spark, settings, registry) -> dict:
    started = time.perf_counter()
    result = run_job(spark, settings, registry, JOB, Trigger(available_now=True))
    seconds = time.perf_counter() - started
    table = settings.layout.table("bronze/clickstream")
    return {"seconds": round(seconds, 1), "micro_batches": (result.last_batch or 0) + 1,
            "rows": delta_store.count_rows(table), "data_files": len(list(table.glob("*.parquet")))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="lakehouse-bench-"))
    base = load_settings()
    registry = load_registry(base.registry_path)
    by_bytes = replace(base, root=work / "bytes")
    write_landing(by_bytes.layout.landing("landing/clickstream"), "clickstream",
                  GeneratorConfig(events=args.files, seed=1, files=args.files, malformed_fraction=0.0,
                                  duplicate_fraction=0.0))
    spark = get_spark(base, app_name="lakehouse-bench")
    warm_up(spark, work)
    result = {"landing_files": args.files,
              "admission": vars(registry.job(JOB).source.admission(available_now=True)),
              "backfill": catch_up(spark, by_bytes, registry)}
    if args.compare:
        by_files = replace(base, root=work / "files")
        shutil.copytree(by_bytes.layout.landing("landing/clickstream"), by_files.layout.landing("landing/clickstream"))
        job = registry.job(JOB)
        live_admission = replace(registry, jobs={**registry.jobs, JOB: replace(job, source=replace(job.source,
                                                                                                   backfill=None))})
        result["live_admission"] = catch_up(spark, by_files, live_admission)
    finish(spark, work, result)


if __name__ == "__main__":
    main()
