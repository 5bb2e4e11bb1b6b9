"""A running query's keeper: the job's lease renewed and checked (self-fencing), its stop requests, the live run's
registry watch, and stopping the query between batches."""

from __future__ import annotations

import logging
import threading
import time

from pyspark.errors import StreamingQueryException

from include.records import job_requests, lease, log_rotation
from include.registry import JobSpec, Registry
from include.settings import Settings
from spark_jobs.evolution import RegistryWatch

log = logging.getLogger(__name__)


def watch_query(settings: Settings, job: JobSpec, query, held: lease.Lease, stop_requested: threading.Event,
                watch: RegistryWatch | None) -> tuple[str, Registry | None]:
    """Keep the lease while the query runs; stop it between batches on a stop request, or when a live run's registry
    file evolves the job (that registry returned). Its status: finished, stopped or restarting."""
    while query.isActive:
        held.renew()
        log_rotation.check_own_log(settings)
        try:
            held.check()
        except lease.LeaseLost:  # self-fencing: stopped before another process may take the lease over
            query.stop()
            raise
        request = job_requests.pending(settings, job.id)
        if request:  # this job's own request: the other jobs of a shared driver go on (`stop_requested` is the signal's)
            log.info("job=%s: stop requested (%s)", job.id, request)
        if request or stop_requested.is_set():
            stop_at_batch_boundary(query, settings.stop_grace_seconds, job.id)
            return "stopped", None
        evolved = watch.evolved() if watch is not None else None
        if evolved is not None:
            log.info("job=%s: the registry changes its output in place (plan evolve): its query stops between "
                     "batches and starts again with it", job.id)
            stop_at_batch_boundary(query, settings.stop_grace_seconds, job.id)
            return "restarting", evolved
        try:
            query.awaitTermination(0.5)
        except StreamingQueryException:  # it failed: its error is read by the caller, and reported with the summary
            break
    return "finished", None


def stop_at_batch_boundary(query, grace_seconds: float, job_id: str) -> None:
    """Wait for the running batch (if any) to finish, then stop the query. Batches that run back to back (longer
    than their trigger interval) leave no moment between them: the next one has just begun when the running one
    reports its progress, and is stopped there (it runs again on the next start, as after any stop mid-batch)."""
    deadline = time.monotonic() + grace_seconds
    running = _last_batch(query)
    while (query.isActive and query.status["isTriggerActive"] and _last_batch(query) == running
           and time.monotonic() < deadline):
        time.sleep(0.05)
    if time.monotonic() >= deadline and query.isActive and query.status["isTriggerActive"]:
        log.warning("job=%s: batch still running after %.0fs; stopping anyway (it will replay)", job_id, grace_seconds)
    log.info("job=%s: stop requested, stopping between batches", job_id)
    query.stop()


def _last_batch(query) -> int | None:
    """The id of the query's last finished batch (None before its first)."""
    progress = query.lastProgress
    return progress["batchId"] if progress else None
