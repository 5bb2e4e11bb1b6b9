"""The spark-submit operator of a registry job: the backfill DAG's half of the one launch path."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from airflow.providers.apache.spark.operators.spark_sql import SparkSqlOperator
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from include.airflow.docs import data_docs_path, data_docs_url
from include.airflow.environment import SPARK_POOL
from include.airflow.tasks import validate_tables
from include.catalog_client import answers
from include.failures import ExitCode
from include.ops.launch import (
    CHECKPOINT_ENTRY,
    MAINTAIN_ENTRY,
    SUBMIT_ENTRY,
    job_submit_kwargs,
    submit_kwargs,
)
from include.records import job_requests, lease, run_outcomes
from include.records.heartbeats import read_heartbeat
from include.registry import ResourcesSpec, load_registry
from include.settings import Settings, load_settings
from include.spark_session import READ_ONLY_EXTENSION, lakehouse_confs


def shared_outcomes(settings: Settings, ti):
    """Where a backfill run's `run_jobs` task records how each of its jobs ended."""
    return settings.layout.run_outcomes(f"{ti.dag_id}/{ti.run_id}")


def stop_then_kill(operator: SparkSubmitOperator, settings: Settings, job_ids: list[str]) -> None:
    """A task kill (the UI, a timeout): ask the jobs to stop at their next batch boundary and wait up to the stop
    grace for the driver to exit 0; only then does the hook kill (SIGKILL) what is left."""
    process = getattr(operator._hook, "_submit_sp", None) if getattr(operator, "_hook", None) else None
    if process is not None and process.poll() is None:
        operator.log.info("asking %s to stop at the next batch boundary", ", ".join(job_ids))
        for job_id in job_ids:
            job_requests.request_stop(settings, job_id, "its Airflow task was killed")
        try:
            process.wait(timeout=settings.stop_grace_seconds)
        except subprocess.TimeoutExpired:
            operator.log.warning("%s did not stop within %.0f s; killing the driver", ", ".join(job_ids),
                                 settings.stop_grace_seconds)


class ReportsJobLineage:
    """What Airflow's OpenLineage provider asks a task when it ends (apache-airflow-providers-openlineage, when its
    `[openlineage]` section configures a transport): the datasets of the jobs it ran (include/airflow/lineage.py)."""

    lakehouse_settings: Settings

    def lineage_jobs(self) -> list[str]:
        raise NotImplementedError

    def name_lineage_parent(self, task_instance) -> None:
        """The driver's runs name this task as their parent (an OpenLineage `parent` facet)."""
        from include.airflow.lineage import parent_environment

        self.env_vars = {**(self.env_vars or {}), **parent_environment(task_instance)}

    def get_openlineage_facets_on_complete(self, task_instance):
        from include.airflow.lineage import jobs_lineage

        return jobs_lineage(self.lakehouse_settings, self.lineage_jobs())

    def get_openlineage_facets_on_failure(self, task_instance):
        return self.get_openlineage_facets_on_complete(task_instance)


class SharedDriverOperator(ReportsJobLineage, SparkSubmitOperator):
    """`run_jobs`: spark-submit of the run's selected jobs in one Spark application, one after another in dependency
    order (`run_job.py <job>... --outcomes DIR`): one driver start for the backfill instead of one per job.

    Each job's own task then reads how its job ended (`include.records.run_outcomes`) and starts no driver when it ran.
    This task is only the fast path: whatever it did not finish (a job that failed or was refused, or the whole
    driver lost) its job's own task runs in a driver of its own, and fails or succeeds for it; so this task fails
    only when it cannot start at all. Jobs whose checkpoint lease another process holds (a live job, or this task's
    previous try still stopping) are left out, and so are the jobs that read them: their own tasks run them after."""

    def __init__(self, *, job_ids: list[str], settings: Settings, resources: ResourcesSpec | None = None, **kwargs):
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(application=str(SUBMIT_ENTRY), **submit_kwargs(settings, "lakehouse-backfill", [], resources),
                         **kwargs)
        self.job_ids = list(job_ids)
        self.lakehouse_settings = settings
        self.running: list[str] = []

    def execute(self, context):

        selected = (context.get("params") or {}).get("jobs") or self.job_ids
        lease.wait_while_catching_up(self.lakehouse_settings, [j for j in self.job_ids if j in selected],
                                     self.lakehouse_settings.stop_grace_seconds)
        held = [j for j in self.job_ids if j in selected and lease.is_held(self.lakehouse_settings, j)]
        registry = load_registry(self.lakehouse_settings.registry_path)
        readers: list[str] = []  # of a left-out job: run here, before it, they would miss what it adds
        for job_id in (j for j in registry.order if j in selected and j in self.job_ids and j not in held):
            if any(u in held or u in readers for u in registry.upstream(job_id)):
                readers.append(job_id)
        self.running = [j for j in self.job_ids if j in selected and j not in held and j not in readers]
        if held:
            self.log.info("left to their own tasks (another process holds their checkpoint): %s%s", ", ".join(held),
                          f"; and their readers: {', '.join(readers)}" if readers else "")
        directory = shared_outcomes(self.lakehouse_settings, context["ti"])
        run_outcomes.clear(directory)
        if not self.running:
            return {}
        self.application_args = [*self.running, "--outcomes", str(directory)]
        self.name_lineage_parent(context["ti"])
        try:
            super().execute(context)
        except AirflowException as exc:  # the jobs it did not finish run in their own tasks, which report them
            self.log.warning("the shared driver did not finish every job (%s); the others run in their own tasks", exc)
        ended = {j: run_outcomes.read(directory, j) for j in self.running}
        for job_id, outcome in ended.items():
            self.log.info("%s: %s", job_id, outcome.summary or f"{outcome.status}: {outcome.detail}" if outcome
                          else "no outcome (its own task runs it)")
        return {j: o.status if o else "none" for j, o in ended.items()}

    def on_kill(self) -> None:
        stop_then_kill(self, self.lakehouse_settings, self.running)
        super().on_kill()

    def lineage_jobs(self) -> list[str]:
        return self.running


class LakehouseSparkSubmitOperator(ReportsJobLineage, SparkSubmitOperator):
    """A registry job's task: done when its job ran in the run's shared driver (`run_jobs`); otherwise (a retry, a
    job `run_jobs` did not finish, or one not in it) spark-submit of that one job (`include.ops.launch`), on
    connection `spark_default`.

    Skipped, with the reason, when another process already runs the job (its checkpoint lease is held:
    typically the live job kept up by `lakehouse_live`, which processes the same input itself). That way the
    backfill and live DAGs can run at once and both stay green. (A manual run's `jobs` param is applied before,
    by the DAG's `select_jobs` branch: a job left out never waits for a pool slot.)
    """

    def __init__(self, *, job_id: str, trigger: str, settings: Settings, resources: ResourcesSpec | None = None,
                 **kwargs):
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(application=str(SUBMIT_ENTRY), **job_submit_kwargs(settings, job_id, trigger, resources),
                         **kwargs)
        self.job_id = job_id
        self.lakehouse_settings = settings

    def lineage_jobs(self) -> list[str]:
        return [self.job_id]

    def execute(self, context):

        ti = context["ti"]
        outcome = run_outcomes.read(shared_outcomes(self.lakehouse_settings, ti), self.job_id)
        if outcome is not None and ti.try_number == 1:  # a retry, or a cleared task, runs the job on its own
            if outcome.ran:
                self.log.info("ran in this run's shared driver (task run_jobs, whose log has its batches)")
                self.log.info("%s", outcome.summary)
                return None
            if outcome.status == "failed":
                raise AirflowException(f"job {self.job_id} failed in this run's shared driver (task run_jobs): "
                                       f"{outcome.detail}; a retry runs it in a driver of its own")
        lease.wait_while_catching_up(self.lakehouse_settings, [self.job_id], self.lakehouse_settings.stop_grace_seconds)
        if lease.is_held(self.lakehouse_settings, self.job_id):
            raise AirflowSkipException(self._running_elsewhere())
        started = datetime.now(UTC)
        self.name_lineage_parent(ti)
        try:
            return super().execute(context)
        except AirflowException:
            process = getattr(self._hook, "_submit_sp", None)
            if process is not None and process.returncode == ExitCode.REFUSED:
                raise AirflowSkipException(self._running_elsewhere()) from None
            raise
        finally:
            self._log_run_summary(started)

    def _log_run_summary(self, since: datetime) -> None:
        """End the task's log with the job's summary line (batches, rows in and out per table, duration)."""
        beat = read_heartbeat(self.lakehouse_settings, self.job_id) or {}
        if beat.get("summary") and datetime.fromisoformat(beat["updated_at"]) >= since:
            self.log.info("%s", beat["summary"])

    def on_kill(self) -> None:
        stop_then_kill(self, self.lakehouse_settings, [self.job_id])
        super().on_kill()

    def _running_elsewhere(self) -> str:
        owner = lease.read_lease(self.lakehouse_settings, self.job_id) or lease.Owner(self.job_id)
        if owner.action:
            return f"{owner.describe()}. Skipped: run the backfill again once it ends"
        return (f"{owner.describe()}. Skipped: that process catches the job up "
                f"itself (stop it with `lakehouse stop {self.job_id}` to backfill here)")


class MaintenanceOperator(SparkSubmitOperator):
    """spark-submit of table maintenance (OPTIMIZE + VACUUM per table, `spark_jobs/entrypoints/maintain_tables.py`); the
    run's `tables` param selects tables (empty: all)."""

    def __init__(self, *, settings: Settings, **kwargs):
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(application=str(MAINTAIN_ENTRY), **submit_kwargs(settings, "lakehouse-maintain", []),
                         **kwargs)

    def execute(self, context):
        tables = list((context.get("params") or {}).get("tables") or [])
        self.application_args = [*tables, "--run-id", str(context.get("run_id") or "")]
        return super().execute(context)


class CatalogSqlOperator(SparkSqlOperator):
    """The Spark provider's SparkSqlOperator over the catalog (connection `lakehouse_sql`): `sql` reads the lakehouse's
    tables by name (`gold.user_activity_5m`), read-only, with the lakehouse's session settings. Skipped while no
    catalog answers (`lakehouse catalog up`)."""

    def __init__(self, *, settings: Settings, **kwargs):
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(conn_id=SQL_CONN_ID, name="lakehouse-sql-task", **kwargs)
        self.settings = settings

    def execute(self, context):

        if not answers(self.settings.metastore_uri):
            raise AirflowSkipException(f"no catalog answers at {self.settings.metastore_uri} (lakehouse catalog up)")
        jars = sorted(str(j) for j in self.settings.jars_dir.glob("*.jar"))
        confs = lakehouse_confs(self.settings)
        self._conf = {**confs, "spark.sql.extensions": f"{confs['spark.sql.extensions']},{READ_ONLY_EXTENSION}",
                      "spark.jars": ",".join(jars), "spark.driver.extraClassPath": ":".join(jars)}
        interpreter_bin = str(Path(sys.executable).parent)  # pyspark's spark-sql, beside this interpreter
        if interpreter_bin not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = f"{interpreter_bin}{os.pathsep}{os.environ.get('PATH', '')}"
        return super().execute(context)


SQL_CONN_ID = "lakehouse_sql"  # include/airflow/connections.json


class CheckpointOperator(ReportsJobLineage, SparkSubmitOperator):
    """spark-submit of a checkpoint command (`spark_jobs/entrypoints/checkpoint_action.py`) with the arguments the
    `plan` task built from the run's params (`planned[args_key]`; skipped when it holds none), the run as the
    audited actor. A dry run needs no Spark: it runs in the task itself."""

    def __init__(self, *, settings: Settings, plan_task_id: str = "plan", args_key: str = "args", **kwargs):
        kwargs.setdefault("pool", SPARK_POOL)
        super().__init__(application=str(CHECKPOINT_ENTRY), **submit_kwargs(settings, "lakehouse-checkpoint", []),
                         **kwargs)
        self.lakehouse_settings = settings
        self.plan_task_id = plan_task_id
        self.args_key = args_key

    def execute(self, context):
        planned = context["ti"].xcom_pull(task_ids=self.plan_task_id)
        if not planned.get(self.args_key):
            raise AirflowSkipException(f"nothing to do: {planned.get('skip_reason', 'see the plan task')}")
        self.application_args = [*planned[self.args_key], "--actor", planned["actor"]]
        if planned.get("dry_run"):
            from spark_jobs.checkpoint_actions import parse_request, run_request

            run_request(self.lakehouse_settings, parse_request(self.application_args))
            return None
        return super().execute(context)

    def lineage_jobs(self) -> list[str]:
        """The jobs the action named (what it reset: their tables and checkpoints); none when it did not run."""
        registry = load_registry(self.lakehouse_settings.registry_path)
        return [a for a in (getattr(self, "application_args", None) or []) if a in registry.jobs]


class QualityReportLink(BaseOperatorLink):
    """"Data quality report" on the quality tasks only: the result of that task's run (set by its execute)."""

    name = "Data quality report"

    def get_link(self, operator, *, ti_key) -> str:
        return getattr(operator, "report_link", "") or ""


class QualityCheckOperator(BaseOperator):
    """Validates gold tables with their Great Expectations suites (`include.quality`). The run's params may
    narrow the tables (`jobs`: only the tables those jobs write) and ask for every row (`full`). Blocking
    failures fail the task; the log ends with the report's URL, also the task's "Data quality report" link."""

    operator_extra_links = (QualityReportLink(),)

    def __init__(self, *, tables: list[str], writers: dict[str, list[str]], **kwargs):
        super().__init__(**kwargs)
        self.tables = list(tables)
        self.writers = {t: list(w) for t, w in writers.items()}  # table -> the jobs that write it
        self.report_link = ""

    def execute(self, context):

        params = context.get("params") or {}
        selected = params.get("jobs") or []
        tables = [t for t in self.tables if not selected or set(self.writers.get(t, ())) & set(selected)]
        ti = context["ti"]
        origin = f"/dags/{ti.dag_id}/runs/{quote(ti.run_id, safe='')}/tasks/{ti.task_id}"  # its page in the UI
        summary, page, failures = validate_tables(tables, full=bool(params.get("full")), origin=origin)
        self.report_link = data_docs_path(page)
        self.log.info("report (the link opens a new tab): %s — data quality %s", data_docs_url(page), summary)
        self.log.info("the report is also this task's Details tab → Extra Links → \"%s\" (Airflow opens it in this "
                      "tab; the report links back to this task) and Browse → Data quality reports (a new tab)",
                      QualityReportLink.name)
        self.validated = tables
        if failures:
            raise AirflowException(f"blocking data-quality failures: {', '.join(failures)}; "
                                   f"report: {data_docs_url(page)}")
        return summary

    def get_openlineage_facets_on_complete(self, task_instance):
        """Airflow's OpenLineage provider: the tables validated, with their checks' results as assertions."""
        from include.airflow.lineage import quality_lineage

        return quality_lineage(load_settings(), getattr(self, "validated", self.tables))

    def get_openlineage_facets_on_failure(self, task_instance):
        return self.get_openlineage_facets_on_complete(task_instance)
