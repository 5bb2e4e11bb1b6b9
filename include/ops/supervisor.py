"""The live supervision of a job: the library behind the `lakehouse_live` DAG.

:func:`supervise_job` takes a snapshot of the job (:func:`snapshot`: its lease, health, bookkeeping and, when it is
down, the preflight's answer), asks the decision table what to do (include/ops/decision.py, pure) and carries that
out (:func:`carry_out`: start or restart it, keep the bookkeeping in :mod:`include.records.bookkeeping`). Every
outcome other than "healthy" is also a row in `_ops/alerts`.

The one-writer guarantee is the lease the job process takes itself: this module only avoids pointless starts and
reports a refused one as "refused".
"""

from __future__ import annotations

import logging
import time

from include.checkpoints.preflight import Refusal, check_start
from include.ops.admission import CapacityFull
from include.ops.decision import (
    Act,
    Bookkeeping,
    Decision,
    Snapshot,
    decide,
)
from include.ops.health import check_job
from include.ops.processes import end_stalled, start_job
from include.records import lease
from include.records.alerts import record_alert
from include.records.bookkeeping import read_state, update_state
from include.registry import Registry
from include.settings import Settings

log = logging.getLogger(__name__)


def supervise_job(settings: Settings, registry: Registry, job_id: str, run_id: str = "") -> str:
    """Check the job and act per its supervision policy; returns one of :data:`include.ops.decision.ACTIONS`.

    healthy; started (was not running: never started, or stopped cleanly); restarted (crashed, or stalled and ended
    first); backing_off (restart not allowed yet); gave_up (max_restarts consecutive restarts done); alerted
    (unhealthy, alert-only policy or a problem a restart does not fix); breached (running, with a state-health
    problem: :data:`include.ops.health.STATE_HEALTH`); refused (another writer holds the lease, also a checkpoint
    action); stopped (stopped by request, stays so); blocked (not running, and its checkpoint plan is not `resume`, a
    checkpoint action on it is unfinished or its checkpoint files are damaged: a person must act first); waiting (not
    running, and the broker of its Kafka source does not answer, or every live driver slot of this host is in use:
    started once it can be; no restart is spent).
    """
    seen = snapshot(settings, registry, job_id)
    return carry_out(settings, registry, seen, decide(seen), run_id)


def snapshot(settings: Settings, registry: Registry, job_id: str) -> Snapshot:
    """What the decision reads of the job now; the preflight only when it is down."""
    job = registry.job(job_id)
    health = check_job(settings, registry, job_id)
    holder = lease.holder(settings, job_id) if health.running else None
    refusal = None if health.running else check_start(settings, registry, job)
    return Snapshot(job_id, job.supervision, health, holder, Bookkeeping.from_state(read_state(settings, job_id)),
                    refusal if isinstance(refusal, Refusal) else None, time.time())


def carry_out(settings: Settings, registry: Registry, seen: Snapshot, decision: Decision, run_id: str = "") -> str:
    """Do what `decision` says to the job; the outcome (the decision's action, or what the world made of its act)."""
    job_id = seen.job

    def alert(reason: str, severity: str) -> None:
        record_alert(settings, job_id, reason, dag_id="lakehouse_live", task_id=f"supervise_{job_id}", run_id=run_id,
                     severity=severity)

    if decision.reset_restarts:
        log.info("job=%s made progress after its last restart (batch %s): restart counter and backoff reset", job_id,
                 seen.health.last_batch_id)
        update_state(settings, job_id, restarts=None, next_allowed_at=None, batch_at_restart=None, pid_at_restart=None)
    if decision.note_stop_alerted:
        update_state(settings, job_id, stopped_by_request={**read_state(settings, job_id)["stopped_by_request"],
                                                           "alerted": True})
    if decision.act is Act.START:
        return _start(settings, registry, job_id, decision, alert)
    if decision.act is Act.RESTART:
        return _restart(settings, registry, seen, decision, alert)
    if decision.alert:
        alert(decision.alert, decision.severity)
    elif decision.action == "stopped":
        log.info("job=%s stays stopped by request (%s)", job_id, seen.book.stop_reason)
    return decision.action


def _start(settings: Settings, registry: Registry, job_id: str, decision: Decision, alert) -> str:
    try:
        pid = start_job(settings, registry, job_id)
    except lease.LeaseHeld as refused:
        alert(f"start refused: {refused}", "info")
        return "refused"
    except CapacityFull as full:
        alert(f"not started: {full}", "warning")
        return "waiting"
    alert(f"{decision.alert}; started as pid {pid}", decision.severity)
    return decision.action


def _restart(settings: Settings, registry: Registry, seen: Snapshot, decision: Decision, alert) -> str:
    """End the stalled driver first (when it runs), count the attempt before starting (a job that dies while starting
    still backs off), then start it; a refused start is no attempt: the counter and the backoff stay as they were."""
    job_id, reason = seen.job, decision.alert
    book = seen.book.cleared() if decision.reset_restarts else seen.book  # as the decision saw it
    if decision.end_first and not end_stalled(settings, job_id, seen.health.pid, registry.job(job_id).group):
        alert(f"{reason}; could not end it (not a process of this host, or it would not die)", "error")
        return "alerted"
    batch = seen.health.last_batch_id
    update_state(settings, job_id, restarts=decision.restart, next_allowed_at=decision.next_allowed_at,
                 batch_at_restart=batch if batch is not None else -1)
    try:
        pid = start_job(settings, registry, job_id)
    except (lease.LeaseHeld, CapacityFull) as refused:
        update_state(settings, job_id, restarts=decision.restart - 1 or None,
                     next_allowed_at=book.next_allowed_at or None, batch_at_restart=book.batch_at_restart)
        if isinstance(refused, CapacityFull):
            alert(f"{reason}; not restarted: {refused}", "warning")
            return "waiting"
        alert(f"{reason}; restart refused: {refused}", "info")
        return "refused"
    update_state(settings, job_id, pid_at_restart=pid)
    max_restarts = seen.policy.max_restarts
    alert(f"{reason}; restarted as pid {pid} (consecutive restart {decision.restart} of at most {max_restarts})",
          decision.severity)
    return decision.action
