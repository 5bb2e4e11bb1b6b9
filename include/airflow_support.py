"""What the DAG files need, kept light for parse time: no pyspark, no great_expectations, no deltalake.

Builds the spark-submit task of a registry job, its Assets and docs, the shared default_args, and
the failure callback that records to `_ops/alerts`.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset

from include.quality.suites import quality_tables
from include.registry import JobSpec, Registry, load_registry
from include.settings import REPO_ROOT, Settings, load_settings

log = logging.getLogger(__name__)

OWNER = "data-platform"
SPARK_CONN_ID = "spark_default"
SUBMIT_ENTRY = REPO_ROOT / "spark_jobs" / "submit.py"


def load() -> tuple[Settings, Registry]:
    settings = load_settings()
    return settings, load_registry(settings.registry_path)


def job_environment(settings: Settings) -> dict[str, str]:
    """Environment for spark-submit: where the lakehouse is, and the interpreter with our packages."""
    python = sys.executable
    return {
        "LAKEHOUSE_ROOT": str(settings.root),
        "LAKEHOUSE_REGISTRY": str(settings.registry_path),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", python),
        "PATH": f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def table_asset(settings: Settings, table: str) -> Asset:
    """The Airflow Asset of a lakehouse Delta table (name = the registry table name)."""
    return Asset(name=table, uri=settings.table_path(table).as_uri(), group="delta")


def record_failure(context) -> None:
    """on_failure_callback: one row in `_ops/alerts` naming the job, the run and the reason."""
    from include.supervision import record_alert

    ti = context.get("ti") or context.get("task_instance")
    task_id = getattr(ti, "task_id", "")
    dag_id = getattr(ti, "dag_id", "")
    run_id = getattr(ti, "run_id", "") or str(context.get("run_id", ""))
    exception = context.get("exception")
    reason = f"{type(exception).__name__}: {exception}" if exception else "task failed"
    job = getattr(context.get("task"), "job_id", task_id)
    try:
        record_alert(load_settings(), job, reason, dag_id=dag_id, task_id=task_id, run_id=run_id)
    except Exception:  # a broken alert sink must not hide the original failure
        log.exception("could not record the failure of %s.%s in _ops/alerts", dag_id, task_id)


def default_args(settings: Settings) -> dict:
    """Owner, retries with exponential backoff, and the failure callback, for every task."""
    return {
        "owner": OWNER,
        "retries": settings.task_retries,
        "retry_delay": timedelta(seconds=30),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "on_failure_callback": record_failure,
    }


def job_doc(settings: Settings, registry: Registry, job: JobSpec, trigger: str) -> str:
    """Markdown shown in the Airflow UI for a job's task."""
    source = " and ".join(
        f"landing files `{settings.root / s.path}`" if s.kind == "landing" else f"new commits of Delta table `{s.name}`"
        for s in job.sources
    )
    writes = ", ".join(f"`{t}` (`{settings.table_path(t)}`)" for t in job.tables_written())
    upstream = ", ".join(registry.upstream(job.id)) or "none"
    return f"""### `{job.id}`

{job.description}

- **Runs**: `spark-submit spark_jobs/submit.py {job.id} --trigger "{trigger}"` on connection `{SPARK_CONN_ID}`
- **Reads**: {source} (upstream jobs: {upstream})
- **Writes**: {writes}, mode `{job.sink.mode}`, each micro-batch committed exactly once
- **Checkpoint**: `{settings.checkpoint_dir(job.id)}` (state store: {job.state_store.provider})

**Recovering**: a failed run can simply be cleared and rerun: the job resumes from its checkpoint
and a replayed micro-batch writes nothing twice. If another process holds the job's checkpoint
lease the run is refused with the holder's pid; stop that writer (`lakehouse stop {job.id}`) first.
"""


class LakehouseSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one registry job; skipped when a manual run's `jobs` param leaves it out."""

    def __init__(self, *, job_id: str, trigger: str, settings: Settings, **kwargs):
        super().__init__(
            application=str(SUBMIT_ENTRY),
            application_args=[job_id, "--trigger", trigger],
            conn_id=SPARK_CONN_ID,
            name=f"lakehouse-{job_id}",
            env_vars=job_environment(settings),
            **kwargs,
        )
        self.job_id = job_id

    def execute(self, context):
        from airflow.sdk.exceptions import AirflowSkipException

        selected = (context.get("params") or {}).get("jobs") or []
        if selected and self.job_id not in selected:
            raise AirflowSkipException(f"{self.job_id} not among the selected jobs {selected}")
        return super().execute(context)


def suite_tables(registry: Registry) -> list[str]:
    """The sink tables that carry quality suites (windows, sessions, joins), in registry order.

    The quality layer's suite specs decide; :mod:`include.quality.suites` is light enough for parse time
    (no pandas, pyarrow, Spark or Great Expectations)."""
    return list(quality_tables(registry))


def validate_tables(tables: list[str], full: bool = False) -> str:
    """Task body: run the quality suites; blocking failures fail the task, warnings are only recorded."""
    from include.quality import run_quality

    settings, registry = load()
    if not tables:
        return "no tables to validate"
    report = run_quality(settings, registry, tables, full=full)
    log.info("%s", report.render())
    if report.blocking_failures:
        failures = ", ".join(f"{r.table}:{r.expectation}" for r in report.blocking_failures)
        raise RuntimeError(f"blocking data-quality failures: {failures}; report: {report.docs_index}")
    return f"passed; report: {report.docs_index}"


QUALITY_DOC = """Validates the gold tables with their Great Expectations suites (derived from the registry).
Windows and sessions: window size and alignment / session bounds (at least the gap), keys, counts,
no future rows, uniqueness, freshness, reconciliation with silver. Joins: the join bound of matched
rows, unmatched rows without right-side values, keys, uniqueness per (left key, right key),
freshness. New Delta versions only, unless `full`. A **blocking** failure fails this task (and is
recorded in `_ops/alerts`); **warnings** are recorded in `_ops/dq_results` only. The report (Data Docs)
is one click away: the task's "Data quality report" link, or *Browse → Data quality reports*."""
