"""The lakehouse DAGs, built from the job registry (include/jobs.yaml).

- `lakehouse_backfill`: every job with the available-now trigger, in dependency order, then quality.
- `lakehouse_live`: keeps the live jobs running with their processing-time triggers.
- `data_quality`: the gold tables' Great Expectations suites, when the tables are updated.
- `lakehouse_maintenance`: compaction and VACUUM of every Delta table, daily.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, AssetAny, Param, task

from include.airflow import load
from include.airflow.assets import table_asset
from include.airflow.callbacks import default_args
from include.airflow.docs import QUALITY_DOC, job_doc
from include.airflow.operators import LakehouseSparkSubmitOperator, MaintenanceOperator
from include.quality.suites import quality_tables

SETTINGS, REGISTRY = load()
GOLD_TABLES = list(quality_tables(REGISTRY))  # the sink tables with quality suites
START = datetime(2026, 1, 1)

BACKFILL_DOC = f"""
# lakehouse_backfill

Catches every streaming job up with an **available-now** trigger: each job processes what has
landed since its last run, in dependency order ({" → ".join(REGISTRY.order)}), and stops.

- **Schedule**: hourly, no catch-up, one active run at a time.
- **Touches**: the Delta tables under `{SETTINGS.root}` (each is an Airflow Asset updated by the
  task that writes it) and each job's checkpoint under `{SETTINGS.layout.checkpoint("<job>")}`.
- **Ends with** `quality_check`: the Great Expectations suites of the gold tables it wrote; a blocking
  failure fails the run (the task's "Data quality report" link opens the report).
- **Manual runs**: set the `jobs` param to run a subset (the others are skipped; jobs downstream of a
  skipped job still run on what their upstream table already holds).
- **Recovering**: clear the failed task. Jobs resume from their checkpoints and every micro-batch is
  committed exactly once, so a rerun never duplicates rows. Failures are recorded in `_ops/alerts`.
"""

with DAG(
    dag_id="lakehouse_backfill",
    schedule="@hourly",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "backfill", "spark"],
    doc_md=BACKFILL_DOC,
    params={
        "jobs": Param(
            [],
            type="array",
            items={"type": "string", "enum": list(REGISTRY.order)},
            description="Jobs to run (empty: all of them, in dependency order).",
        )
    },
) as backfill:
    tasks = {}
    for job_id in REGISTRY.order:
        job = REGISTRY.jobs[job_id]
        trigger = str(job.triggers["backfill"])
        tasks[job_id] = LakehouseSparkSubmitOperator(
            task_id=job_id,
            job_id=job_id,
            trigger=trigger,
            settings=SETTINGS,
            outlets=[table_asset(SETTINGS, t) for t in job.tables_written()],
            trigger_rule="none_failed",
            doc_md=job_doc(SETTINGS, REGISTRY, job, trigger),
        )
        for upstream in REGISTRY.upstream(job_id):
            tasks[upstream] >> tasks[job_id]

    @task(task_id="quality_check", trigger_rule="none_failed", doc_md=QUALITY_DOC)
    def quality_check(params=None) -> str:
        from include.airflow.tasks import validate_tables

        selected = (params or {}).get("jobs") or list(REGISTRY.order)
        written = [REGISTRY.jobs[j].sink.table for j in selected if REGISTRY.jobs[j].sink.table in GOLD_TABLES]
        return validate_tables(written)

    check = quality_check()
    for job_id in REGISTRY.order:
        if REGISTRY.jobs[job_id].sink.table in GOLD_TABLES:
            tasks[job_id] >> check


LIVE_JOBS = [job_id for job_id in REGISTRY.order if REGISTRY.jobs[job_id].live]
LIVE_DOC = f"""
# lakehouse_live

Keeps the live jobs ({", ".join(LIVE_JOBS)}) running with their **processing-time** triggers.
Every 5 minutes each task checks its job: is it running (checkpoint lease + heartbeat), is it
healthy (batches not stalled, batch duration within the trigger interval, input rate not above
processing rate, state not only growing, watermark advancing), and acts per the job's
`supervision` policy in the registry: start it, restart it with exponential backoff, or alert.

- **One writer per checkpoint, always**: a job holds a lease on its checkpoint while it runs; a second
  start (overlapping runs, a restarted scheduler or worker) is refused and reported as `refused`.
- **Stopping**: trigger this DAG with the `stop` param listing jobs: they stop at a batch boundary
  and stay stopped (supervision does not restart them) until started again with the `start` param.
- **Touches**: `_ops/heartbeats/`, `_ops/supervisor/`, `_ops/alerts`, job logs in `_ops/logs/` under
  `{SETTINGS.root}`.
- **Recovering**: a job that exhausted its restarts is `gave_up` and this task fails: read its log
  in `_ops/logs/<job>.log`, fix the cause, then trigger with `start`.
"""

with DAG(
    dag_id="lakehouse_live",
    schedule="*/5 * * * *",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args={**default_args(SETTINGS), "retries": 0},
    tags=["lakehouse", "live", "spark", "supervision"],
    doc_md=LIVE_DOC,
    params={
        "stop": Param([], type="array", items={"type": "string", "enum": LIVE_JOBS},
                      description="Jobs to stop at their next batch boundary (they stay stopped)."),
        "start": Param([], type="array", items={"type": "string", "enum": LIVE_JOBS},
                       description="Stopped jobs to start again."),
    },
) as live:
    for job_id in LIVE_JOBS:
        job = REGISTRY.jobs[job_id]

        @task(
            task_id=f"supervise_{job_id}",
            doc_md=f"Supervises `{job_id}` ({job.triggers['live']}): "
            f"policy `{job.supervision.on_down}`, at most {job.supervision.max_restarts} consecutive restarts, "
            f"backoff from {job.supervision.backoff_seconds}s. Fails when the job has `gave_up`.\n\n"
            + job_doc(SETTINGS, REGISTRY, job, str(job.triggers["live"])),
        )
        def supervise(job_id: str = job_id, params=None, run_id=None) -> str:
            from include.airflow.tasks import supervise

            return supervise(job_id, params, run_id or "")

        supervise()


QUALITY_DAG_DOC = f"""
# data_quality

Runs the Great Expectations suites of the gold tables ({", ".join(GOLD_TABLES)}: windows, sessions and
joins) whenever
one of them is updated (Airflow Assets written by `lakehouse_backfill`), and on demand.

- **Severity**: blocking expectations fail the task; warnings are recorded only. Every result goes
  to `_ops/dq_results` (table, version range, expectation, success, observed value).
- **Report**: Data Docs under `{SETTINGS.layout.data_docs}`, served in the UI under
  *Browse → Data quality reports* and linked from every task ("Data quality report").
- **Incremental**: each run validates the Delta versions written since the last validation; set the
  `full` param to validate every row.
- **Recovering**: fix the data (or the job) and rerun; a failing expectation names its observed value.
"""

with DAG(
    dag_id="data_quality",
    schedule=AssetAny(*(table_asset(SETTINGS, t) for t in GOLD_TABLES)),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "quality", "great_expectations"],
    doc_md=QUALITY_DAG_DOC,
    params={"full": Param(False, type="boolean", description="Validate every row, not only new versions.")},
) as data_quality:
    for table in GOLD_TABLES:

        @task(task_id=f"validate_{table.replace('/', '__')}", doc_md=QUALITY_DOC)
        def validate(table: str = table, params=None) -> str:
            from include.airflow.tasks import validate_tables

            return validate_tables([table], full=bool((params or {}).get("full")))

        validate()


TABLES = REGISTRY.tables_written()
MAINTENANCE_DOC = f"""
# lakehouse_maintenance

Micro-batches make many small files. Daily (and on demand) this compacts every Delta table the jobs write
(`OPTIMIZE`) and removes data files no longer referenced and older than the table's retention (`VACUUM`),
per the writer's `sink.maintenance` in the registry (default: compact, keep 7 days, Delta's default).

- **Params**: `tables`, the tables to maintain (empty: all of them).
- **Safe beside running jobs**: appends and VACUUM do not conflict with compaction; a table whose writer is
  running and upserts (MERGE) is not compacted this time (recorded as skipped, with the holder).
- **Runs**: `spark-submit spark_jobs/maintain.py` on connection `spark_default`, like the jobs.
- **Touches**: the tables under `{SETTINGS.root}`; every operation is a row in `_ops/maintenance` (what ran,
  files before/after, versions, duration, outcome). A failed operation fails the task after the others ran.
"""

with DAG(
    dag_id="lakehouse_maintenance",
    schedule="@daily",
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "maintenance", "delta"],
    doc_md=MAINTENANCE_DOC,
    params={"tables": Param([], type="array", items={"type": "string", "enum": TABLES},
                            description="Tables to maintain (empty: every table).")},
) as maintenance:
    MaintenanceOperator(task_id="optimize_and_vacuum", settings=SETTINGS, doc_md=MAINTENANCE_DOC)
