"""Benchmark: what one small micro-batch costs, and where: a 100-row Delta append as a plain write and as the jobs
write it (idempotent: Delta's `txnAppId` / `txnVersion`), with the Spark jobs each write runs; then the jobs of one
lineage (bronze, silver, 5-minute windows) run file by file (one landing file per batch), each batch's duration and
its foreachBatch part (`addBatch`) from `_ops/query_progress`.

    .venv/bin/python bench/micro_batch_cost.py [--writes 12] [--files 12]

Why: live jobs on few cores spend most of a small batch in fixed costs; this names them (issue 25's fleet and
issue 22's latency). Delta 4.4 answers an idempotent write's "was this batch written?" from the snapshot's
reconstructed state (`Snapshot.transactions`): a Spark job ("Compute snapshot for version N") per write, which a
plain append does not run, although the table's checksum file already lists its app transactions. The jobs
append through `append_batch` (`project_append`): the same commit, without that lookup.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, options, warm_up  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.records.query_progress import PROGRESS_TABLE  # noqa: E402
from include.registry import Trigger, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from spark_jobs.delta_txn import append_batch  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

LINEAGE = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


def timed_writes(spark, rows, path: Path, writes: int, idempotent: bool, project: bool = False) -> dict:
    """`writes` appends of `rows` to a new table (`project`: as the jobs append, `append_batch`): median and max
    milliseconds, and the Spark jobs and stages each write runs (medians)."""
    context, tracker = spark.sparkContext, spark.sparkContext.statusTracker()
    seconds, jobs, stages = [], [], []
    for number in range(writes):
        group = f"{path.name}-{number}"
        context.setJobGroup(group, "bench write")
        writer = rows.coalesce(1).write.format("delta").mode("append")
        if idempotent:
            writer = writer.option("txnAppId", "bench:query").option("txnVersion", number)
        started = time.perf_counter()
        if project:
            append_batch(rows.coalesce(1), str(path), "bench:query", number,
                         delta_store.latest_version(path) if number else -1)
        else:
            writer.save(str(path))
        seconds.append(time.perf_counter() - started)
        ids = tracker.getJobIdsForGroup(group)
        jobs.append(len(ids))
        stages.append(sum(len(info.stageIds) for info in map(tracker.getJobInfo, ids) if info))
    context.setJobGroup("", "")
    return {"median_ms": round(statistics.median(seconds) * 1000), "max_ms": round(max(seconds) * 1000),
            "spark_jobs_per_write": statistics.median(jobs), "stages_per_write": statistics.median(stages)}


def lineage_batches(spark, settings, registry, files: int) -> dict:
    """The lineage run available-now over `files` landing files, one per batch: per job, batches and the median
    batch and foreachBatch milliseconds."""
    write_landing(settings.layout.landing("landing/clickstream"), "clickstream",
                  GeneratorConfig(events=100 * files, seed=3, files=files))
    for job_id in LINEAGE:
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    rows = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
    result = {}
    for job_id in LINEAGE:
        batches = [r for r in rows if r["job"] == job_id and r["num_input_rows"]]
        result[job_id] = {"batches": len(batches),
                          "batch_ms_median": statistics.median(r["batch_duration_ms"] for r in batches),
                          "add_batch_ms_median": statistics.median(r["add_batch_ms"] for r in batches)}
    return result


def main() -> None:
    args = options(__doc__, writes=12, files=12).parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-micro-batch-"))
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"] = {j: {k: v for k, v in raw["jobs"][j].items() if k != "group"} for j in LINEAGE}
    raw.pop("groups", None)
    raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 1}
    (work / "jobs.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    settings = replace(load_settings(), root=work / "lakehouse", registry_path=work / "jobs.yaml")
    spark = get_spark(settings, app_name="bench-micro-batch")
    warm_up(spark, work)
    rows = spark.range(100).selectExpr("id", "cast(id as string) as name", "current_timestamp() as at").persist()
    rows.count()
    result = {
        "plain_append": timed_writes(spark, rows, work / "plain", args.writes, idempotent=False),
        "idempotent_append": timed_writes(spark, rows, work / "idempotent", args.writes, idempotent=True),
        "project_append": timed_writes(spark, rows, work / "project", args.writes, idempotent=True, project=True),
        "lineage_one_file_per_batch": lineage_batches(spark, settings, load_registry(settings.registry_path),
                                                      args.files),
    }
    finish(spark, work, result)


if __name__ == "__main__":
    main()
