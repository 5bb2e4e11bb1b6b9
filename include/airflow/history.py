"""Airflow's own history, kept as long as LAKEHOUSE_AIRFLOW_HISTORY_DAYS: `lakehouse_live` alone runs every five
minutes (288 runs a day, a task per live unit each), and Airflow keeps every run's rows in its metadata database and
every task try's log file forever. The `lakehouse_maintenance` DAG's `clean_airflow_history` task deletes, for this
project's DAGs only, the runs older than that (with their task instances, XComs, audit log rows and task jobs:
`airflow db clean`, which keeps each DAG's latest scheduled run) and the task log files last written before it
(under `<base_log_folder>/dag_id=<dag>/`, Airflow's default log file layout)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

LOG = logging.getLogger(__name__)
PROJECT_DAG_IDS = ("lakehouse_backfill", "lakehouse_live", "data_quality", "lakehouse_maintenance", "checkpoint_reset")
CLEANED_TABLES = ("dag_run", "task_instance", "task_instance_history", "xcom", "log", "job")
# Airflow 3.3's `db clean --dag-ids` filters these on a dag_id column they do not have, and fails on them; their rows
# go with their run's (foreign keys with ON DELETE CASCADE)
DAG_FILTER_UNSUPPORTED = {"deadline", "task_reschedule"}
NOT_CLEANED = re.compile(r"not cleaned due to errors: \[([^\]]*)\]")


def task_log_folder() -> Path:
    """Airflow's `[logging] base_log_folder` (the task logs)."""
    from airflow.configuration import conf

    return Path(conf.get("logging", "base_log_folder")).expanduser()


def clean_task_logs(folder: Path, before: datetime) -> int:
    """Delete the files under `folder` last written before `before`, then the folders under it left empty; the files
    deleted."""
    if not folder.is_dir():
        return 0
    cutoff, deleted = before.timestamp(), 0
    for directory, _, names in os.walk(folder, topdown=False):
        for name in names:
            path = Path(directory) / name
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    deleted += 1
            except FileNotFoundError:  # another cleaner, or Airflow moving a log: nothing to do
                continue
        if Path(directory) != folder and not any(Path(directory).iterdir()):
            Path(directory).rmdir()
    return deleted


def clean_metadata(dag_ids: list[str], before: datetime) -> str:
    """`airflow db clean` of `dag_ids`' rows older than `before` (no archive tables); its output. RuntimeError with
    its last line when it fails, or naming the tables it could not clean (but those it never can with a DAG filter)."""
    from include.airflow.environment import airflow_command

    command = [*airflow_command(), "db", "clean",
               "--clean-before-timestamp", before.astimezone(UTC).isoformat(), "--dag-ids", ",".join(dag_ids),
               "--tables", ",".join(CLEANED_TABLES), "--skip-archive", "--yes"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        last = (output.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"airflow db clean failed (exit {result.returncode}): {last}")
    failed = {t.strip(" '\"") for m in NOT_CLEANED.finditer(output) for t in m.group(1).split(",")} - {""}
    if failed - DAG_FILTER_UNSUPPORTED:
        raise RuntimeError(f"airflow db clean could not clean {', '.join(sorted(failed - DAG_FILTER_UNSUPPORTED))} "
                           f"(its output: {output.strip().splitlines()[-1]})")
    return output


def clean_airflow_history(dag_ids: list[str], days: int, now: datetime | None = None) -> dict:
    """Delete the runs of `dag_ids` and their task logs older than `days`; what was done."""
    before = (now or datetime.now(UTC)) - timedelta(days=days)
    clean_metadata(dag_ids, before)
    folder = task_log_folder()
    logs = sum(clean_task_logs(folder / f"dag_id={dag_id}", before) for dag_id in dag_ids)
    LOG.info("Airflow history before %s deleted: the runs of %s; %d task log files under %s", before.isoformat(),
             ", ".join(dag_ids), logs, folder)
    return {"before": before.isoformat(), "dag_ids": dag_ids, "task_logs_deleted": logs, "log_folder": str(folder)}
