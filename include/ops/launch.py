"""The one way a job is launched: spark-submit of `spark_jobs/entrypoints/run_job.py` through the Airflow connection.

Backfills (`LakehouseSparkSubmitOperator`), live jobs (`include.ops.processes`) and table maintenance
all use :func:`submit_kwargs` (connection, name, arguments, environment, Delta's jars) and Airflow's
`SparkSubmitHook` builds the command, so a cluster set in `spark_default` runs all of them.

A job process's exit codes (spark-submit passes the driver's on): :class:`include.failures.ExitCode`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from include.jvm_archive import driver_java_options
from include.registry import ResourcesSpec, Trigger
from include.settings import REPO_ROOT, Settings

SPARK_CONN_ID = "spark_default"
ENTRYPOINTS = REPO_ROOT / "spark_jobs" / "entrypoints"  # the scripts spark-submit runs
SUBMIT_ENTRY = ENTRYPOINTS / "run_job.py"  # a job: <job> --trigger <trigger>
MAINTAIN_ENTRY = ENTRYPOINTS / "maintain_tables.py"  # table maintenance: [<table>...] [--run-id ID]
CHECKPOINT_ENTRY = ENTRYPOINTS / "checkpoint_action.py"  # checkpoint actions: <mode> <job>... [options]


def job_environment(settings: Settings) -> dict[str, str]:
    """What a job process needs beyond the launcher's environment: the lakehouse, the registry, the
    batch hooks, the Kafka broker, the catalog, and this interpreter (which has the project's packages) for the driver and
    workers."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    env = {
        **settings.storage_environment(),
        "LAKEHOUSE_REGISTRY": str(settings.registry_path),
        "LAKEHOUSE_JARS_DIR": str(settings.jars_dir),
        "LAKEHOUSE_SPARK_LOG_LEVEL": settings.spark_log_level,
        "LAKEHOUSE_KAFKA_TIMEOUT_SECONDS": str(settings.kafka_timeout_seconds),
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if settings.batch_hooks:
        env["LAKEHOUSE_BATCH_HOOKS"] = settings.batch_hooks
    if settings.spark_java_options:  # the job's own processes (a checkpoint action's runs) start drivers too
        env["LAKEHOUSE_SPARK_JAVA_OPTIONS"] = settings.spark_java_options
    if settings.spark_executor_java_options:
        env["LAKEHOUSE_SPARK_EXECUTOR_JAVA_OPTIONS"] = settings.spark_executor_java_options
    if settings.kafka_bootstrap_set:  # the broker the launcher was told of, not the connection's
        env["LAKEHOUSE_KAFKA_BOOTSTRAP"] = settings.kafka_bootstrap
    if settings.metastore_uri_set:  # the catalog the launcher was told of
        env["LAKEHOUSE_METASTORE_URI"] = settings.metastore_uri
    return env


def submit_kwargs(settings: Settings, name: str, application_args: list[str],
                  resources: ResourcesSpec | None = None, live: bool = False) -> dict:
    """Keyword arguments shared by SparkSubmitOperator and SparkSubmitHook: the connection, the environment,
    Delta's jars (from the project's cache, so spark-submit resolves nothing), the driver's JVM options (`live`: a
    live driver's) and resources (the registry's `resources`; the driver memory LAKEHOUSE_SPARK_DRIVER_MEMORY unless
    they say)."""
    resources = resources or ResourcesSpec()
    return {
        "conn_id": SPARK_CONN_ID,
        "application_args": application_args,
        "name": name,
        "env_vars": job_environment(settings),
        "jars": ",".join(str(j) for j in sorted(settings.jars_dir.glob("*.jar"))),
        "conf": {"spark.driver.extraJavaOptions": driver_java_options(settings, resources.jit(live))},
        "driver_memory": resources.driver_memory or settings.spark_driver_memory,
        "executor_memory": resources.executor_memory,
        "executor_cores": resources.executor_cores,
        "total_executor_cores": resources.cores_max,  # spark.cores.max: a standalone application takes every core
    }


def job_submit_kwargs(settings: Settings, job_id: str, trigger: Trigger | str,
                      resources: ResourcesSpec | None = None) -> dict:
    """spark-submit of one run of a registry job (application: SUBMIT_ENTRY)."""
    return submit_kwargs(settings, f"lakehouse-{job_id}", [job_id, "--trigger", str(trigger)], resources,
                         live=not Trigger.parse(str(trigger)).available_now)


def group_submit_kwargs(settings: Settings, group: str, resources: ResourcesSpec | None = None) -> dict:
    """spark-submit of a group's live jobs in one driver, each with its live trigger (application: SUBMIT_ENTRY)."""
    return submit_kwargs(settings, f"lakehouse-group-{group}", ["--group", group], resources, live=True)


def spark_submit_command(settings: Settings, job_id: str, trigger: Trigger | str) -> list[str]:
    """The spark-submit command line for the job, built by Airflow's SparkSubmitHook from the connection."""
    return submit_command(job_submit_kwargs(settings, job_id, trigger))


def submit_command(kwargs: dict) -> list[str]:
    """The spark-submit command line of SUBMIT_ENTRY with these arguments (`job_submit_kwargs`,
    `group_submit_kwargs`), built by Airflow's SparkSubmitHook from the connection."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    return SparkSubmitHook(**kwargs)._build_spark_submit_command(str(SUBMIT_ENTRY))
