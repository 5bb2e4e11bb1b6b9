"""default_args of every lakehouse task, and the failure callback that records to `_ops/alerts`."""

from __future__ import annotations

import logging
from datetime import timedelta

from include.settings import Settings, load_settings

log = logging.getLogger(__name__)

OWNER = "data-platform"


class RequestRefused(SystemExit):
    """A task refuses what a person asked in a run's form: the task fails with this one line (Airflow logs a
    SystemExit without a traceback), and it is not an operational alert."""

    def __init__(self, reason: str):
        super().__init__(f"refused: {reason}")


def record_failure(context) -> None:
    """on_failure_callback: one row in `_ops/alerts` naming the job, the run and the reason (not for a refused
    request: nothing broke)."""
    from include.records.alerts import record_alert

    if isinstance(context.get("exception"), RequestRefused):
        return
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
