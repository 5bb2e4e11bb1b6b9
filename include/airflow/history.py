"""Airflow's own history kept for `LAKEHOUSE_AIRFLOW_HISTORY_DAYS`: `lakehouse airflow-history`.

Every `lakehouse_live` run (one each five minutes, 288 a day) adds a DAG run, task instances and log files, and
Airflow deletes none of them. `airflow db clean` deletes old rows of the metadata database (a DAG's last scheduled run
is kept, for its schedule); Airflow 3 lets it run only outside tasks (a task's process gets no database URL: the Task
SDK reaches Airflow through its API), so it runs beside Airflow's components, as the official Helm chart's
database-cleanup CronJob and log-groomer sidecar do: the cluster's `airflow-history` part runs it every hour
(include/cluster/airflow_services.py), docker-compose.yaml's `airflow-history` service too, `make airflow` before
it starts `airflow standalone`. The log files (task attempts, the DAG processor's) older than the same age are
deleted with the folders they leave empty.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from include.airflow.environment import airflow_command, airflow_environment
from include.settings import Settings

log = logging.getLogger(__name__)

DB_CLEAN_TIMEOUT_SECONDS = 1800


class HistoryError(RuntimeError):
    """`airflow db clean` failed; the message ends with its last output lines."""


@dataclass(frozen=True)
class HistoryCleaned:
    before: datetime  # what started before this was deleted
    log_files: int
    log_bytes: int

    def render(self) -> str:
        return (f"Airflow history before {self.before.isoformat(timespec='seconds')} deleted: old runs, task "
                f"instances and events (airflow db clean), {self.log_files} log files ({self.log_bytes / 1e6:.1f} MB)")


def clean_history(settings: Settings) -> HistoryCleaned:
    """Delete Airflow's metadata rows and log files older than `settings.airflow_history_days`."""
    env = airflow_environment(settings)
    before = datetime.now(UTC) - timedelta(days=settings.airflow_history_days)
    command = airflow_command() + ["db", "clean", "--clean-before-timestamp", before.isoformat(), "--skip-archive",
                                   "--error-on-cleanup-failure", "--yes"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=DB_CLEAN_TIMEOUT_SECONDS)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise HistoryError(f"`airflow db clean` exited {done.returncode}:\n{tail}")
    files, size = remove_old_logs(log_folder(env), before.timestamp())
    return HistoryCleaned(before, files, size)


def log_folder(env: dict[str, str]) -> Path:
    """Airflow's base log folder: `AIRFLOW__LOGGING__BASE_LOG_FOLDER`, else `$AIRFLOW_HOME/logs`."""
    return Path(env.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or Path(env["AIRFLOW_HOME"]) / "logs")


def remove_old_logs(folder: Path, before: float) -> tuple[int, int]:
    """Delete `*.log` files under `folder` last written before `before` (a POSIX time), then the folders left empty
    and the links left dangling (the DAG processor's `latest`); (files, bytes) deleted."""
    files = size = 0
    if not folder.is_dir():
        return files, size
    for directory, folders, names in os.walk(folder, topdown=False):  # a link to a folder is one of `folders`
        here = Path(directory)
        for name in folders + names:
            path = here / name
            # Airflow writes beside this: a file gone meanwhile, or a folder written into again, is left to it
            with contextlib.suppress(FileNotFoundError):
                if path.is_symlink():
                    if not path.exists():
                        path.unlink()
                    continue
                if name in names and name.endswith(".log") and (stat := path.stat()).st_mtime < before:
                    path.unlink()
                    files, size = files + 1, size + stat.st_size
        if here != folder:
            with contextlib.suppress(OSError):
                here.rmdir()  # only an empty folder goes
    return files, size


def keep_cleaning(settings: Settings, every_minutes: float) -> None:
    """Clean now and then every `every_minutes`, for ever (the cluster's part); a failure is logged, not fatal."""
    while True:
        try:
            log.info("%s", clean_history(settings).render())
        except (HistoryError, OSError, subprocess.TimeoutExpired) as exc:
            log.error("Airflow history not cleaned (again in %.0f minutes): %s", every_minutes, exc)
        time.sleep(every_minutes * 60)
