"""The lakehouse DAGs, built from the job registry (include/jobs.yaml).

- `lakehouse_backfill`: every job with the available-now trigger, in dependency order, then quality.
- `lakehouse_live`: keeps the live jobs running with their live triggers.
- `data_quality`: the Great Expectations suites (gold and SCD tables; bronze's rescued fields), when they are updated.
- `lakehouse_maintenance`: compaction and VACUUM of every Delta table, daily.
- `checkpoint_reset`: manual checkpoint actions (repartition, reset, full refresh), approved by a person.

The DAGs have no start_date and no catch-up: unpausing one schedules its next tick in the future, so a
person's first manual run (the trigger dialog unpauses the DAG) runs at once instead of queueing behind a
scheduled run of the past interval. New DAGs start paused (Airflow's default, `dags_are_paused_at_creation`).

This file says which tasks run in which order; what each DAG and task is, their docs in the UI, is written in
include/airflow/docs.py.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, AssetAny, CronTriggerTimetable, Param, task
from airflow.sdk.exceptions import DownstreamTasksSkipped

from include.airflow import load
from include.airflow import tasks as lakehouse_tasks  # the tasks' code (`tasks` below is a DAG's tasks)
from include.airflow.assets import table_asset
from include.airflow.callbacks import default_args
from include.airflow.docs import (
    APPROVAL_DOCS,
    APPROVE_DOC,
    CHECKPOINT_DOC,
    CHECKPOINT_FORM,
    QUALITY_DOC,
    RUN_JOBS_DOC,
    SELECT_JOBS_DOC,
    VERIFY_DOC,
    backfill_doc,
    health_report_doc,
    job_doc,
    live_doc,
    maintenance_doc,
    mode_section,
    quality_dag_doc,
    summary_sql_doc,
    supervise_doc,
    with_docs,
)
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


def lakehouse_dag(dag_id: str, *, description: str, schedule: CronTriggerTimetable | AssetAny | None,
                  tags: list[str], doc_md: str, params: dict[str, Param], retries: int | None = None) -> DAG:
    """One of the lakehouse's DAGs: no catch-up, one active run at a time, the project's default args (with
    `retries` when given)."""
    args = default_args(SETTINGS) | ({} if retries is None else {"retries": retries})
    return DAG(dag_id=dag_id, description=description, schedule=schedule, catchup=False, max_active_runs=1,
               default_args=args, tags=tags, doc_md=doc_md, params=params)


QUALITY_TABLES = list(quality_tables(REGISTRY))  # the sink tables with quality suites: gold, SCD, bronze's rescued fields
# The backfill's jobs that drain and stop by themselves share one driver (`run_jobs`)
SHARED_DRIVER_JOBS = [j for j in REGISTRY.order if REGISTRY.jobs[j].triggers["backfill"].available_now]
WRITERS = {t: [w.id for w in REGISTRY.writers_of(t)] for t in QUALITY_TABLES}


def health_report_task():
    """The `health_report` task of the backfill and live DAGs: runs after every other task, whatever they did."""

    @task(task_id="health_report", trigger_rule="all_done", doc_md=health_report_doc(SETTINGS))
    def health_report() -> str:
        return lakehouse_tasks.health_report()

    return health_report()


with lakehouse_dag(
    "lakehouse_backfill",
    description="Catch every streaming job up (available-now), then quality. Run it with Trigger → Single run; "
                "Airflow's date-range Backfill is not needed: each run reads everything not read yet.",
    schedule=on_cron("@hourly"),
    tags=["lakehouse", "backfill", "spark"],
    doc_md=with_docs(backfill_doc(SETTINGS, REGISTRY), "operations/airflow.md", "The DAGs and the Airflow UI"),
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
    @task(task_id="select_jobs", doc_md=SELECT_JOBS_DOC)
    def select_jobs(params=None) -> list[str]:
        selected = (params or {}).get("jobs") or []
        left_out = [j for j in REGISTRY.order if selected and j not in selected]
        if left_out:  # not a branch: a branch never skips what a followed task leads to (a selected job's downstream)
            raise DownstreamTasksSkipped(tasks=left_out)
        return list(REGISTRY.order)

    selection = select_jobs()
    shared = SharedDriverOperator(
        task_id="run_jobs", job_ids=SHARED_DRIVER_JOBS, settings=SETTINGS, resources=REGISTRY.default_resources,
        doc_md=RUN_JOBS_DOC)
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

with lakehouse_dag(
    "lakehouse_live",
    description="Keep the live streaming jobs running: start, restart with backoff, stop or start on request.",
    schedule=on_cron("*/5 * * * *"),
    tags=["lakehouse", "live", "spark", "supervision"],
    doc_md=with_docs(live_doc(SETTINGS, REGISTRY), "operations/live-supervision.md", "Live supervision"),
    retries=0,
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
        @task(task_id=f"supervise_{unit}", doc_md=supervise_doc(SETTINGS, REGISTRY, unit, members))
        def supervise(unit: str = unit, params=None, run_id=None) -> dict:
            return lakehouse_tasks.supervise(unit, params, run_id or "")

        supervised.append(supervise())
    supervised >> health_report_task()


SUMMARY_SQL = ("SELECT 'gold.user_activity_5m' AS table_name, count(*) AS row_count, max(window_end) AS latest "
               "FROM gold.user_activity_5m")

with lakehouse_dag(
    "data_quality",
    description="Great Expectations suites of the gold and bronze tables when they change; the report is in Browse → Data "
                "quality reports.",
    schedule=AssetAny(*(table_asset(SETTINGS, t) for t in QUALITY_TABLES)),
    tags=["lakehouse", "quality", "great_expectations"],
    doc_md=with_docs(quality_dag_doc(SETTINGS, QUALITY_TABLES), "operations/data-quality.md", "Data quality"),
    params={"full": Param(False, type="boolean", description="Validate every row, not only new versions.")},
) as data_quality:
    for table in QUALITY_TABLES:
        QualityCheckOperator(task_id=f"validate_{table.replace('/', '__')}", tables=[table], writers=WRITERS,
                             doc_md=QUALITY_DOC)
    CatalogSqlOperator(task_id="gold_summary_by_name", settings=SETTINGS, doc_md=summary_sql_doc(SETTINGS),
                       sql=SUMMARY_SQL)


TABLES = REGISTRY.tables_written()

with lakehouse_dag(
    "lakehouse_maintenance",
    description="Daily compaction (OPTIMIZE) and VACUUM of every Delta table the jobs write.",
    schedule=on_cron("@daily"),
    tags=["lakehouse", "maintenance", "delta"],
    doc_md=with_docs(maintenance_doc(SETTINGS), "operations/maintenance.md", "Maintenance"),
    params={"tables": Param(None, type=["null", "array"], items={"type": "string", "enum": TABLES}, examples=TABLES,
                            description="Tables to maintain; leave empty to maintain every table.")},
) as maintenance:
    MaintenanceOperator(task_id="optimize_and_vacuum", settings=SETTINGS, doc_md=maintenance_doc(SETTINGS))


with lakehouse_dag(
    "checkpoint_reset",
    description="A person's checkpoint action (repartition, reset, full refresh, rollback): planned, approved, "
                "applied, verified, audited.",
    schedule=None,
    tags=["lakehouse", "checkpoint", "operations"],
    doc_md=with_docs(CHECKPOINT_DOC, "concepts/checkpoints.md", "Checkpoints and plans"),
    retries=0,
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
        doc_md=APPROVE_DOC,
    )

    @task(task_id="stop_live_jobs", trigger_rule="none_failed_min_one_success",
          doc_md="Stops the target jobs that run now, at a batch boundary.")
    def stop(planned: dict) -> list[str]:
        return lakehouse_tasks.stop_live_jobs(planned)

    apply = CheckpointOperator(task_id="apply", settings=SETTINGS, doc_md=CHECKPOINT_DOC)

    verify = CheckpointOperator(
        task_id="verify", settings=SETTINGS, args_key="verify_args",
        doc_md=VERIFY_DOC)

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
