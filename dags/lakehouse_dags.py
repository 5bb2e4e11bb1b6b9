"""The lakehouse DAGs, built from the job registry (include/jobs.yaml).

- `lakehouse_backfill`: every job with the available-now trigger, in dependency order, then quality.
- `lakehouse_live`: keeps the live jobs running with their live triggers.
- `data_quality`: the Great Expectations suites (gold tables; bronze's rescued fields), when the tables are updated.
- `lakehouse_maintenance`: compaction and VACUUM of every Delta table, daily.
- `checkpoint_reset`: manual checkpoint actions (repartition, reset, full refresh), approved by a person.

The DAGs have no start_date and no catch-up: unpausing one schedules its next tick in the future, so a
person's first manual run (the trigger dialog unpauses the DAG) runs at once instead of queueing behind a
scheduled run of the past interval. New DAGs start paused (Airflow's default, `dags_are_paused_at_creation`).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, AssetAny, CronTriggerTimetable, Param, task
from airflow.sdk.exceptions import DownstreamTasksSkipped

from include.airflow import load
from include.airflow import tasks as lakehouse_tasks  # the tasks' code (`tasks` below is a DAG's tasks)
from include.airflow.assets import table_asset
from include.airflow.callbacks import default_args
from include.airflow.docs import QUALITY_DOC, docs_link, job_doc, with_docs
from include.airflow.operators import (
    CatalogSqlOperator,
    CheckpointOperator,
    LakehouseSparkSubmitOperator,
    MaintenanceOperator,
    QualityCheckOperator,
    SharedDriverOperator,
)
from include.checkpoints.request import APPLIED_MODES, MODES, param_specs
from include.quality.suites import quality_tables

SETTINGS, REGISTRY = load()


def on_cron(cron: str) -> CronTriggerTimetable:
    """A cron schedule (UTC) whose first run, after the DAG is unpaused, is its next tick: never a run of a tick
    already past (Airflow's default runs one when unpaused within minutes of a tick), which would take the one
    active-run slot from the person's manual run."""
    return CronTriggerTimetable(cron, timezone="UTC", run_immediately=timedelta(0))
QUALITY_TABLES = list(quality_tables(REGISTRY))  # the sink tables with quality suites: gold, and bronze's rescued fields
# The backfill's jobs that drain and stop by themselves share one driver (`run_jobs`)
SHARED_DRIVER_JOBS = [j for j in REGISTRY.order if REGISTRY.jobs[j].triggers["backfill"].available_now]
WRITERS = {t: [w.id for w in REGISTRY.writers_of(t)] for t in QUALITY_TABLES}

HEALTH_REPORT_DOC = f"""Rebuilds the pipeline-health report, `{SETTINGS.layout.health_report_index}`: per job, charts
of state rows, batch duration against the trigger interval, input and processing rates, watermark delay and rows
dropped by the watermark, with its health problems flagged. Served at `/lakehouse-health/` (Browse → "Pipeline
health report")."""


def health_report_task():
    """The `health_report` task of the backfill and live DAGs: runs after every other task, whatever they did."""

    @task(task_id="health_report", trigger_rule="all_done", doc_md=HEALTH_REPORT_DOC)
    def health_report() -> str:
        return lakehouse_tasks.health_report()

    return health_report()


BACKFILL_DOC = f"""
# lakehouse_backfill

Catches every streaming job up with an **available-now** trigger: each job processes what has
landed since its last run, in dependency order ({" → ".join(REGISTRY.order)}), and stops.
`run_jobs` runs them all in **one Spark application** (one driver start, not one per job); each job's own task
then shows how its job ended, with its summary line, and runs the job itself (a driver of its own) when `run_jobs`
did not finish it, or on a retry.

- **Schedule**: hourly, no catch-up, one active run at a time.
- **Touches**: the Delta tables under `{SETTINGS.root}` (each is an Airflow Asset updated by the
  task that writes it) and each job's checkpoint under `{SETTINGS.layout.checkpoint("<job>")}`.
- **Ends with** `quality_check`: the Great Expectations suites of the tables it wrote (gold; bronze's rescued fields); a blocking
  failure fails the run (the task's "Data quality report" link opens the report). `health_report`
  rebuilds the pipeline-health report (Browse → "Pipeline health report").
- **Which button**: Trigger → *Single run*. Airflow's *Backfill* (a run per date in a range) is not needed:
  the jobs keep their place in checkpoints, so one run catches up on everything that landed, whatever the dates.
- **Manual runs**: set the `jobs` param to run a subset (the others are skipped; jobs downstream of a
  skipped job still run on what their upstream table already holds).
- **Recovering**: clear the failed task. Jobs resume from their checkpoints and every micro-batch is
  committed exactly once, so a rerun never duplicates rows. Failures are recorded in `_ops/alerts`.
"""

with DAG(
    dag_id="lakehouse_backfill",
    description="Catch every streaming job up (available-now), then quality. Run it with Trigger → Single run; "
                "Airflow's date-range Backfill is not needed: each run reads everything not read yet.",
    schedule=on_cron("@hourly"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "backfill", "spark"],
    doc_md=with_docs(BACKFILL_DOC, "operations/airflow.md", "The DAGs and the Airflow UI"),
    params={
        "jobs": Param(
            None,
            type=["null", "array"],
            items={"type": "string", "enum": list(REGISTRY.order)},
            examples=list(REGISTRY.order),
            description="Jobs to run; leave empty to run all of them, in dependency order.",
        )
    },
) as backfill:
    @task(task_id="select_jobs", doc_md="Applies the run's `jobs` param (empty: every job): the jobs left out are "
                                       "skipped here, so they never wait for a Spark pool slot.")
    def select_jobs(params=None) -> list[str]:
        selected = (params or {}).get("jobs") or []
        left_out = [j for j in REGISTRY.order if selected and j not in selected]
        if left_out:  # not a branch: a branch never skips what a followed task leads to (a selected job's downstream)
            raise DownstreamTasksSkipped(tasks=left_out)
        return list(REGISTRY.order)

    selection = select_jobs()
    shared = SharedDriverOperator(
        task_id="run_jobs", job_ids=SHARED_DRIVER_JOBS, settings=SETTINGS, resources=REGISTRY.default_resources,
        doc_md="Runs the selected jobs in **one Spark application**, one after another in dependency order: one "
               "driver start instead of one per job. Its log has every job's batches; each job's own task then "
               "shows how its job ended (and its summary line). A job it did not finish (failed, refused, or the "
               "driver lost) runs in its own task, in a driver of its own, so a retry or a cleared job task never "
               "needs this one.")
    selection >> shared
    tasks = {}
    for job_id in REGISTRY.order:
        job = REGISTRY.jobs[job_id]
        trigger = str(job.triggers["backfill"])
        tasks[job_id] = LakehouseSparkSubmitOperator(
            task_id=job_id,
            job_id=job_id,
            trigger=trigger,
            settings=SETTINGS,
            resources=job.resources,
            outlets=[table_asset(SETTINGS, t) for t in job.tables_written()],
            trigger_rule="none_failed",
            doc_md=job_doc(SETTINGS, REGISTRY, job, trigger),
        )
        shared >> tasks[job_id]
        for upstream in REGISTRY.upstream(job_id):
            tasks[upstream] >> tasks[job_id]

    check = QualityCheckOperator(
        task_id="quality_check", tables=QUALITY_TABLES, writers=WRITERS, trigger_rule="none_failed", doc_md=QUALITY_DOC)
    # After every job, not only the gold writers: a failed job fails the run even when the jobs downstream of it
    # were left out by `select_jobs` (a skip does not pass the failure on).
    [*tasks.values()] >> check
    [*tasks.values()] >> health_report_task()

LIVE_UNITS = REGISTRY.live_units()  # a group of live jobs (one driver) or a job alone: a supervise task each
LIVE_JOBS = [job_id for members in LIVE_UNITS.values() for job_id in members]
LIVE_DOC = f"""
# lakehouse_live

Keeps the live jobs ({", ".join(LIVE_JOBS)}) running with their **live** triggers (`processing-time=<interval>`,
or `on-upstream-commit`: a batch as soon as a table the job reads commits).
A registry **group** runs as one driver (one Spark application, one JVM) with a streaming query per job; its task
(`supervise_<group>`) sees to each of its jobs, a line per job in its log. A job without a group runs alone
(`supervise_<job>`). Groups here: {", ".join(f"{u} ({len(m)} jobs)" for u, m in LIVE_UNITS.items() if u not in
REGISTRY.jobs) or "none"}.
Every 5 minutes each task checks each of its jobs, then watches them for {SETTINGS.live_watch_seconds} s
(`LAKEHOUSE_LIVE_WATCH_SECONDS`, every 10 s, from their leases): a job that crashes or fails is restarted within
about 10 s once its backoff allows, not at the next run; a stall is seen by the next run's check. The check: is it running (checkpoint lease + heartbeat), is it
healthy (batches not stalled, batch duration within the trigger interval, input rate not above
processing rate, state not only growing, watermark advancing), and acts per the job's
`supervision` policy in the registry: start it, restart it with exponential backoff, or alert.

- **One writer per checkpoint, always**: a job holds a lease on its checkpoint while it runs; a second
  start (overlapping runs, a restarted scheduler or worker) is refused and reported as `refused`.
- **Stopping**: trigger this DAG with the `stop` param listing jobs: they stop at a batch boundary
  and stay stopped (supervision does not restart them) until started again with the `start` param.
- **Touches**: `_ops/heartbeats/`, `_ops/supervisor/`, `_ops/alerts`, job logs in `_ops/logs/` under
  `{SETTINGS.root}`.
- **State health**: a running job whose state health is breached (state growing with no removals, watermark
  stuck, rows dropped by the watermark, state memory near the executor memory, partition skew; thresholds in
  its `supervision.health`) gets an `_ops/alerts` row and its task **fails** (no retry) while it lasts; the
  job keeps running. `health_report` rebuilds the pipeline-health report (Browse → "Pipeline health report").
- **Recovering**: a job that exhausted its restarts is `gave_up` and this task fails: read its log
  in `_ops/logs/<job>.log` (a group's: `_ops/logs/<group>.log`), fix the cause, then trigger with `start`.
- **Groups**: a job of a group that fails or is stopped ends alone, its siblings go on; restarting or starting it
  asks the group's running driver (no new JVM). A group's driver that dies is started again as a whole.
"""

with DAG(
    dag_id="lakehouse_live",
    description="Keep the live streaming jobs running: start, restart with backoff, stop or start on request.",
    schedule=on_cron("*/5 * * * *"),
    catchup=False,
    max_active_runs=1,
    default_args={**default_args(SETTINGS), "retries": 0},
    tags=["lakehouse", "live", "spark", "supervision"],
    doc_md=with_docs(LIVE_DOC, "operations/live-supervision.md", "Live supervision"),
    params={
        "stop": Param(None, type=["null", "array"], items={"type": "string", "enum": LIVE_JOBS}, examples=LIVE_JOBS,
                      description="Jobs to stop at their next batch boundary (they stay stopped); leave empty to "
                                  "stop none."),
        "start": Param(None, type=["null", "array"], items={"type": "string", "enum": LIVE_JOBS}, examples=LIVE_JOBS,
                       description="Stopped jobs to start again; leave empty to start none (supervision alone)."),
    },
) as live:
    supervised = []
    for unit, members in LIVE_UNITS.items():
        first = REGISTRY.jobs[members[0]]
        heading = (f"Supervises `{unit}` ({first.triggers['live']}): " if unit == members[0] else
                   f"Supervises group `{unit}`: {', '.join(f'`{m}`' for m in members)} as one driver, a streaming "
                   "query each (a line per job in this log). ")

        @task(
            task_id=f"supervise_{unit}",
            doc_md=heading + f"Policy `{first.supervision.on_down}`, at most {first.supervision.max_restarts} "
            f"consecutive restarts, backoff from {first.supervision.backoff_seconds}s (per job). Fails when a job "
            "has `gave_up`, is blocked or breaches its state health.\n\n"
            + "\n\n".join(job_doc(SETTINGS, REGISTRY, REGISTRY.jobs[m], str(REGISTRY.jobs[m].triggers["live"]))
                          for m in members),
        )
        def supervise(unit: str = unit, params=None, run_id=None) -> dict:
            return lakehouse_tasks.supervise(unit, params, run_id or "")

        supervised.append(supervise())
    supervised >> health_report_task()


QUALITY_DAG_DOC = f"""
# data_quality

Runs the Great Expectations suites of the tables that have one ({", ".join(QUALITY_TABLES)}: gold windows,
sessions, joins, running totals, alerts and session summaries; bronze's rows with rescued fields, i.e. fields
the source's schema does not name, and their names) whenever one of them is updated (Airflow Assets written by `lakehouse_backfill`), and on demand.

- **Severity**: blocking expectations fail the task; warnings are recorded only. Every result goes
  to `_ops/dq_results` (table, version range, expectation, success, observed value).
- **Report**: Data Docs under `{SETTINGS.layout.data_docs}`, served in the UI under
  *Browse → Data quality reports* and linked from every task ("Data quality report").
- **Incremental**: each run validates the Delta versions written since the last validation; set the
  `full` param to validate every row.
- **Recovering**: fix the data (or the job) and rerun; a failing expectation names its observed value.
"""

SUMMARY_SQL = ("SELECT 'gold.user_activity_5m' AS table_name, count(*) AS row_count, max(window_end) AS latest "
               "FROM gold.user_activity_5m")
SUMMARY_SQL_DOC = f"""
# gold_summary_by_name

The pattern for a DAG author who reads the lakehouse by name: the Spark provider's `SparkSqlOperator` (connection
`lakehouse_sql`) with plain SQL over the catalog, read-only. Here the rows and the latest window of
`gold.user_activity_5m`, in the task's log; skipped while no catalog answers at `{SETTINGS.metastore_uri}`.
"""

with DAG(
    dag_id="data_quality",
    description="Great Expectations suites of the gold and bronze tables when they change; the report is in Browse → Data "
                "quality reports.",
    schedule=AssetAny(*(table_asset(SETTINGS, t) for t in QUALITY_TABLES)),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "quality", "great_expectations"],
    doc_md=with_docs(QUALITY_DAG_DOC, "operations/data-quality.md", "Data quality"),
    params={"full": Param(False, type="boolean", description="Validate every row, not only new versions.")},
) as data_quality:
    for table in QUALITY_TABLES:
        QualityCheckOperator(task_id=f"validate_{table.replace('/', '__')}", tables=[table], writers=WRITERS,
                             doc_md=QUALITY_DOC)
    CatalogSqlOperator(task_id="gold_summary_by_name", settings=SETTINGS, doc_md=SUMMARY_SQL_DOC, sql=SUMMARY_SQL)

TABLES = REGISTRY.tables_written()
MAINTENANCE_DOC = f"""
# lakehouse_maintenance

Micro-batches make many small files. Daily (and on demand) this compacts every Delta table the jobs write
(`OPTIMIZE`) and removes data files no longer referenced and older than the table's retention (`VACUUM`),
per the writer's `sink.maintenance` in the registry (default: compact, keep 7 days, Delta's default).

- **Operational tables** (when `tables` is empty): `_ops/query_progress` rows older than
  `LAKEHOUSE_PROGRESS_RETENTION_DAYS` deleted; every `_ops` table compacted, vacuumed and its commit log cleaned.
- **Catalog** (when `tables` is empty and a catalog answers): every table named or corrected, as
  `lakehouse catalog sync` does (never dropped).
- **Params**: `tables`, the tables to maintain (empty: all of them).
- **Safe beside running jobs**: appends and VACUUM do not conflict with compaction; a table whose writer is
  running and upserts (MERGE) is not compacted this time (recorded as skipped, with the holder).
- **Runs**: `spark-submit spark_jobs/entrypoints/maintain_tables.py` on connection `spark_default`, like the jobs.
- **Touches**: the tables under `{SETTINGS.root}`; every operation is a row in `_ops/maintenance` (what ran,
  files before/after, versions, duration, outcome). A failed operation fails the task after the others ran.
"""

with DAG(
    dag_id="lakehouse_maintenance",
    description="Daily compaction (OPTIMIZE) and VACUUM of every Delta table the jobs write.",
    schedule=on_cron("@daily"),
    catchup=False,
    max_active_runs=1,
    default_args=default_args(SETTINGS),
    tags=["lakehouse", "maintenance", "delta"],
    doc_md=with_docs(MAINTENANCE_DOC, "operations/maintenance.md", "Maintenance"),
    params={"tables": Param(None, type=["null", "array"], items={"type": "string", "enum": TABLES}, examples=TABLES,
                            description="Tables to maintain; leave empty to maintain every table.")},
) as maintenance:
    MaintenanceOperator(task_id="optimize_and_vacuum", settings=SETTINGS, doc_md=MAINTENANCE_DOC)


CHECKPOINT_FORM = "The action"


def mode_section(mode: str) -> str:
    """The trigger form's section of a mode's own options."""
    return f"Only for {mode}: {MODES[mode].help}"


APPROVAL_DOCS = docs_link("concepts/checkpoints.md", "Checkpoints and plans") + " (what each mode destroys, and its undo)"
CHECKPOINT_DOC = """
# checkpoint_reset

Manual checkpoint actions, the same as `lakehouse checkpoint <mode>` (see *Checkpoints and plans*, linked
below; `lakehouse checkpoint plan` says which one a registry change needs):

- **repartition**: move a job's state to the registry's `state_store.shuffle_partitions` (the only source of
  the count); nothing is reprocessed.
- **reset-checkpoint**: keep the sink table, start a new checkpoint at `from_version`, `from_timestamp`
  or `from_latest` (the plan says which versions are missed or read again).
- **full-refresh**: empty the sink tables (a new Delta version; history kept) and rebuild them from all
  source data; `cascade` rebuilds the downstream jobs too (required when there are any).
- **rollback** (one job, `to_batch`): restore the job's tables (Delta RESTORE) and checkpoint to what batch
  `to_batch` committed (`_ops/batch_ledger`); the next run re-runs the later batches on the same input.
  Refused while a downstream job has read what it would undo (roll that job back first).

Tasks: `plan` validates the form and shows the plans -> `approve`, a person's approval (Browse ->
Required Actions), only when the mode destroys state and `dry_run` is off -> `stop_live_jobs` (at a batch
boundary) -> `apply` (`spark-submit spark_jobs/entrypoints/checkpoint_action.py` on `spark_default`) -> `verify` (every
plan is `resume` again and, unless `verify_run` is off, an available-now run of each target resumes and
commits) -> `restart_live_jobs` -> `audit` (`_ops/checkpoint_audit`: every action, dry
runs and rejections included). `dry_run` is on by default. Old checkpoints are moved aside as
`_checkpoints/<job>.reset-<n>`, never deleted in place. A run whose approval is rejected changes nothing.
"""

with DAG(
    dag_id="checkpoint_reset",
    description="A person's checkpoint action (repartition, reset, full refresh, rollback): planned, approved, "
                "applied, verified, audited.",
    schedule=None,
    catchup=False,
    max_active_runs=1,
    default_args={**default_args(SETTINGS), "retries": 0},
    tags=["lakehouse", "checkpoint", "operations"],
    doc_md=with_docs(CHECKPOINT_DOC, "concepts/checkpoints.md", "Checkpoints and plans"),
    params={
        "jobs": Param(None, type=["null", "array"], examples=list(REGISTRY.order), section=CHECKPOINT_FORM,
                      items={"type": "string", "enum": list(REGISTRY.order)},
                      description="Jobs whose checkpoint to act on (at least one: left empty, the run refuses)."),
        "mode": Param(None, type=["null", "string"], enum=[None, *APPLIED_MODES], section=CHECKPOINT_FORM,
                      values_display={m: f"{m}: {MODES[m].help}" + (" (destroys state)" if MODES[m].destructive
                                                                     else "") for m in APPLIED_MODES},
                      description="What to do; `lakehouse checkpoint plan` says what a registry change needs. The "
                                  "options of the chosen mode are in its own section below; leave the others empty."),
        "dry_run": Param(True, type="boolean", section=CHECKPOINT_FORM,
                         description="Say what would happen; change nothing, stop nothing."),
        **{name: Param(False, type="boolean", description=spec["description"], section=mode_section(spec["mode"]))
           if spec["type"] == "boolean" else
           Param(None, type=["null", spec["type"]], description=spec["description"], section=mode_section(spec["mode"]),
                 **({"minimum": spec["minimum"]} if spec["minimum"] is not None else {}))
           for name, spec in param_specs().items()},
        "verify_run": Param(True, type="boolean", section="After the action",
                            description="After the action, run each target once with available-now: it resumes from "
                                        "its checkpoint and commits what is pending (after a rollback, the undone "
                                        "batches again, on the same input). Off: check the plans only."),
    },
) as checkpoint_reset:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    @task(task_id="plan", doc_md="Validates the form and shows the plan of every job the action touches.")
    def plan(params=None, run_id=None) -> dict:
        return lakehouse_tasks.checkpoint_plan(params or {}, run_id or "")

    @task.branch(task_id="gate", doc_md="A person approves actions that destroy state (unless a dry run).")
    def gate(planned: dict) -> list[str]:
        return ["approve", "stop_live_jobs"] if planned["needs_approval"] else ["stop_live_jobs"]

    approve = ApprovalOperator(
        task_id="approve",
        subject="Checkpoint {{ params.mode }} of {{ params.jobs | join(', ') }}: destroys state",
        body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}\n\nWhat is this? " + APPROVAL_DOCS,
        defaults="Reject",  # the safe answer is the one the form proposes
        doc_md="Approve to apply; reject (the default) to change nothing (the run records the rejection). The text "
               "is the plan: per job what is moved aside, emptied, rebuilt or rewound, its tables' rows and versions "
               "now, the jobs downstream, the running jobs stopped and restarted, and how to undo it.",
    )

    @task(task_id="stop_live_jobs", trigger_rule="none_failed_min_one_success",
          doc_md="Stops the target jobs that run now, at a batch boundary.")
    def stop(planned: dict) -> list[str]:
        return lakehouse_tasks.stop_live_jobs(planned)

    apply = CheckpointOperator(task_id="apply", settings=SETTINGS, doc_md=CHECKPOINT_DOC)

    verify = CheckpointOperator(
        task_id="verify", settings=SETTINGS, args_key="verify_args",
        doc_md="`lakehouse checkpoint verify`: every target's plan is `resume` again and (param `verify_run`) an "
               "available-now run resumes from the checkpoint and commits, upstream first. Skipped in a dry run.")

    @task(task_id="restart_live_jobs", trigger_rule="all_done", doc_md="Starts again what `stop_live_jobs` stopped.")
    def restart(stopped: list[str] | None) -> list[str]:
        return lakehouse_tasks.restart_live_jobs(stopped)

    @task(task_id="audit", trigger_rule="all_done", doc_md="Records and shows the run in `_ops/checkpoint_audit`.")
    def audit(planned: dict | None, ti=None, run_id=None) -> str:
        states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[run_id]).get(run_id, {})
        return lakehouse_tasks.audit_checkpoint_run(planned, sorted(t for t, state in states.items() if state == "failed"), run_id)

    planned = plan()
    stopped = stop(planned)
    gate(planned) >> [approve, stopped]
    approve >> stopped
    restarted = restart(stopped)
    stopped >> apply >> verify >> restarted >> audit(planned)
