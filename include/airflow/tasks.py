"""Task bodies of the lakehouse DAGs (imported lazily by the tasks, so heavy imports wait for run time)."""

from __future__ import annotations

import logging

from include.airflow import load

log = logging.getLogger(__name__)


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


def supervise(job_id: str, params: dict | None = None, run_id: str = "") -> str:
    """Task body of `lakehouse_live`: stop or start the job on request, else supervise it per its policy."""
    from include.ops import processes
    from include.ops.lease import LeaseHeld
    from include.ops.supervisor import supervise_job

    settings, registry = load()
    params = params or {}
    if job_id in params.get("stop", []):
        stopped = processes.stop_job(settings, job_id, f"stop requested by lakehouse_live {run_id}",
                                     wait_seconds=settings.stop_grace_seconds)
        if not stopped:
            raise RuntimeError(f"{job_id} did not stop within {settings.stop_grace_seconds}s")
        return "stopped"
    if job_id in params.get("start", []):
        try:
            processes.start_job(settings, registry, job_id)
        except LeaseHeld as running:
            return f"already running: {running}"
        return "started"
    action = supervise_job(settings, registry, job_id, run_id=run_id)
    if action == "gave_up":
        raise RuntimeError(f"{job_id}: too many consecutive restarts; see {settings.layout.job_log(job_id)}")
    return action
