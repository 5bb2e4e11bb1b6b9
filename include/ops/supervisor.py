"""The live supervision policy: the library behind the `lakehouse_live` DAG.

:func:`supervise_job` checks a job (:mod:`include.ops.health`) and acts per its `supervision` policy
(start, restart with backoff, alert, give up), keeping its bookkeeping in
:mod:`include.records.bookkeeping`. Every action other than "healthy" is also a row in `_ops/alerts`.

The one-writer guarantee is the lease the job process takes itself: this module only avoids
pointless starts and reports a refused one as "refused".
"""

from __future__ import annotations

import logging
import time

from include.checkpoints.plan import PENDING, plan_job
from include.kafka.connection import unreachable_broker
from include.ops.admission import CapacityFull
from include.ops.health import STATE_HEALTH, check_job
from include.ops.processes import end_stalled, start_job
from include.records import lease
from include.records.alerts import record_alert
from include.records.bookkeeping import read_state, update_state
from include.registry import Registry
from include.settings import Settings

log = logging.getLogger(__name__)

ACTIONS = ("healthy", "started", "restarted", "backing_off", "gave_up", "alerted", "breached", "refused", "stopped",
           "blocked", "waiting")
CLEAN_STATUSES = ("stopped", "finished")  # heartbeat statuses of a job that ended on purpose


def progressed_since_restart(state: dict, health) -> bool:
    """Whether the job made progress after its last restart: a batch committed after it, or an idle heartbeat of the
    restarted process (nothing to read, and healthy). Either resets the restart counter, also when the job has
    crashed again since (a job that crashes now and then while making progress never reaches `gave_up`)."""
    at = state.get("batch_at_restart")  # recorded with each restart (-1: before any batch)
    if at is not None and health.last_batch_id is not None and health.last_batch_id > at:
        return True
    beat = health.heartbeat or {}
    return beat.get("status") == "idle" and state.get("pid_at_restart") is not None and (
        beat.get("pid") == state["pid_at_restart"])


def supervise_job(settings: Settings, registry: Registry, job_id: str, run_id: str = "") -> str:
    """Check the job and act per its supervision policy; returns one of :data:`ACTIONS`.

    healthy; started (was not running: never started, or stopped cleanly); restarted (crashed, or
    stalled and ended first); backing_off (restart not allowed yet); gave_up (max_restarts
    consecutive restarts done); alerted (unhealthy, alert-only policy or a problem a restart does
    not fix); breached (running, with a state-health problem: :data:`include.ops.health.STATE_HEALTH`); refused (another writer holds the lease); stopped (stopped by request, stays so);
    blocked (not running, and its checkpoint plan is not `resume`, or a checkpoint action on it is unfinished: a
    person must act first); refused also while a checkpoint action holds the job; waiting (not running, and the
    broker of its Kafka source does not answer, or every live driver slot of this host is in use: started once it
    can be; no restart is spent).
    """
    job = registry.job(job_id)
    policy = job.supervision
    health = check_job(settings, registry, job_id)
    state = read_state(settings, job_id)

    def alert(reason: str, severity: str = "error") -> None:
        record_alert(settings, job_id, reason, dag_id="lakehouse_live", task_id=f"supervise_{job_id}",
                     run_id=run_id, severity=severity)

    owner = lease.read_lease(settings, job_id) if health.running else None
    if owner and owner.get("action"):  # a checkpoint action holds the job: never ended, never started under it
        alert(f"not supervised now: {lease.describe_holder(job_id, owner)}", "info")
        return "refused"

    if int(state.get("restarts", 0)) and progressed_since_restart(state, health):
        log.info("job=%s made progress after its last restart (batch %s): restart counter and backoff reset",
                 job_id, health.last_batch_id)
        state = update_state(settings, job_id, restarts=None, next_allowed_at=None, batch_at_restart=None,
                             pid_at_restart=None)
    if health.healthy:
        return "healthy"

    stop = state.get("stopped_by_request")
    if stop:
        if not health.running:
            if stop.get("alerted"):  # said once, when it stopped: not again every supervision run
                log.info("job=%s stays stopped by request (%s)", job_id, stop.get("reason", ""))
            else:
                alert(f"stopped by request ({stop.get('reason', '')}); not started until started explicitly", "info")
                update_state(settings, job_id, stopped_by_request={**stop, "alerted": True})
            return "stopped"
        alert(f"asked to stop but still running with problems: {', '.join(health.problems)}", "warning")
        return "alerted"

    status = (health.heartbeat or {}).get("status")
    if health.running:
        breaches = [p for p in health.problems if p in STATE_HEALTH]
        if breaches and "stalled" not in health.problems:
            alert(f"state health breached: {', '.join(breaches)}" + (
                f" (also {', '.join(p for p in health.problems if p not in breaches)})"
                if len(breaches) < len(health.problems) else "") + f"; `lakehouse state {job_id}` and the health "
                "report show where", "error")
            return "breached"
        if "stalled" not in health.problems:
            alert(f"unhealthy: {', '.join(health.problems)}", "warning")
            return "alerted"
        reason = (f"stalled (pid {health.pid}): no heartbeat for {health.heartbeat_age_seconds or 0:.0f}s"
                  + (f", also {', '.join(p for p in health.problems if p != 'stalled')}"
                     if len(health.problems) > 1 else ""))
    else:
        plan = plan_job(job, registry, settings.layout.checkpoint(job_id), settings=settings)
        if plan.mode == PENDING:
            alert(f"not started: {plan.note}")
            return "blocked"
        if not plan.startable:
            alert(f"not started: its checkpoint plan is {plan.mode} ({', '.join(c.field for c in plan.changes)} "
                  f"changed in the registry); apply it with `{plan.command}` first")
            return "blocked"
        down = unreachable_broker(settings, job)
        if down:
            message = f"{down}: not started until it answers (its checkpoint keeps its place)"
            log.warning("%s: %s", job_id, message)
            alert(message, "warning")
            return "waiting"
        if health.heartbeat is None or status in CLEAN_STATUSES:
            try:
                pid = start_job(settings, registry, job_id)
            except lease.LeaseHeld as refused:
                alert(f"start refused: {refused}", "info")
                return "refused"
            except CapacityFull as full:
                alert(f"not started: {full}", "warning")
                return "waiting"
            alert(f"not running ({'never started' if status is None else status}); started as pid {pid}", "info")
            return "started"
        reason = f"not running: crashed (last heartbeat status {status!r}, batch {health.last_batch_id})"

    if policy.on_down != "restart":
        alert(f"{reason}; policy on_down={policy.on_down}: not restarting")
        return "alerted"
    restarts = int(state.get("restarts", 0))
    if restarts >= policy.max_restarts:
        alert(f"{reason}; gave up after {restarts} consecutive restarts (max_restarts {policy.max_restarts})")
        return "gave_up"
    wait = float(state.get("next_allowed_at", 0)) - time.time()
    if wait > 0:
        alert(f"{reason}; restart {restarts + 1} allowed in {wait:.0f}s (backoff)", "warning")
        return "backing_off"
    if health.running and not end_stalled(settings, job_id, health.pid, job.group):
        alert(f"{reason}; could not end it (not a process of this host, or it would not die)")
        return "alerted"

    # Count the attempt before starting, so a job that dies while starting still backs off.
    restarts += 1
    update_state(
        settings, job_id, restarts=restarts,
        next_allowed_at=time.time() + policy.backoff_seconds * 2 ** (restarts - 1),
        batch_at_restart=health.last_batch_id if health.last_batch_id is not None else -1,
    )
    try:
        pid = start_job(settings, registry, job_id)
    except (lease.LeaseHeld, CapacityFull) as refused:  # not an attempt: the counter and backoff stay as they were
        update_state(settings, job_id, restarts=restarts - 1 or None,
                      next_allowed_at=state.get("next_allowed_at"), batch_at_restart=state.get("batch_at_restart"))
        if isinstance(refused, CapacityFull):
            alert(f"{reason}; not restarted: {refused}", "warning")
            return "waiting"
        alert(f"{reason}; restart refused: {refused}", "info")
        return "refused"
    update_state(settings, job_id, pid_at_restart=pid)
    alert(f"{reason}; restarted as pid {pid} (consecutive restart {restarts} of at most {policy.max_restarts})")
    return "restarted"

