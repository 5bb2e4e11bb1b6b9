"""What the live supervisor does about one job, decided from a snapshot of it: a pure function, no I/O.

:func:`decide` reads a :class:`Snapshot` (the lease's holder, the heartbeat, the last progress and the health
problems found in it, the registry's supervision policy, the supervisor's bookkeeping, and, when the job is down, why
it may not start) and returns a :class:`Decision`: the act (leave it, start it, restart it) and what to report.
include/ops/supervisor.py gathers the snapshot and carries the decision out; an act that the world refuses (the
lease taken meanwhile, no live driver slot) reports that instead. Each row of the table below has its test."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from include.checkpoints.plan import PENDING
from include.checkpoints.preflight import BrokerDown, Refusal
from include.ops.health import STATE_HEALTH, Health
from include.records.lease import Owner
from include.registry.specs import SupervisionSpec

ACTIONS = ("healthy", "started", "restarted", "backing_off", "gave_up", "alerted", "breached", "refused", "stopped",
           "blocked", "waiting")
CLEAN_STATUSES = ("stopped", "finished")  # heartbeat statuses of a job that ended on purpose


class Act(StrEnum):
    LEAVE = "leave"  # nothing to do to the process (the report, if any, is all)
    START = "start"  # not running, and it ended on purpose or never ran: start it
    RESTART = "restart"  # crashed, or stalled (then ended first): start it again, counted against max_restarts


@dataclass(frozen=True)
class Bookkeeping:
    """The supervisor's record of the job (include/records/bookkeeping.py)."""

    restarts: int = 0  # consecutive restarts
    next_allowed_at: float = 0.0  # epoch seconds: no restart before (backoff)
    batch_at_restart: int | None = None  # its last batch at the last restart (-1: before any batch)
    pid_at_restart: int | None = None  # the driver the last restart started
    stop_reason: str | None = None  # stopped by request, and why: it stays stopped
    stop_alerted: bool = False  # that stop was reported once

    @classmethod
    def from_state(cls, state: dict) -> Bookkeeping:
        stop = state.get("stopped_by_request")
        return cls(int(state.get("restarts") or 0), float(state.get("next_allowed_at") or 0.0),
                   state.get("batch_at_restart"), state.get("pid_at_restart"),
                   None if stop is None else str(stop.get("reason", "")), bool(stop and stop.get("alerted")))

    def cleared(self) -> Bookkeeping:
        """After progress since the last restart: no restart counted, no backoff."""
        return replace(self, restarts=0, next_allowed_at=0.0, batch_at_restart=None, pid_at_restart=None)


@dataclass(frozen=True)
class Snapshot:
    job: str
    policy: SupervisionSpec  # the registry's `supervision` of the job
    health: Health  # running (its lease), heartbeat, last batch, problems (progress against its live trigger)
    holder: Owner | None  # who holds its lease, while it runs
    book: Bookkeeping
    refusal: Refusal | None  # when it does not run: why it may not start now (the preflight), else None
    now: float  # epoch seconds


@dataclass(frozen=True)
class Decision:
    action: str  # what the supervision run reports (one of ACTIONS) when the act goes as decided
    act: Act = Act.LEAVE
    alert: str = ""  # the report ("" none); a start adds its outcome to it
    severity: str = "error"
    reset_restarts: bool = False  # it progressed since its last restart: the counter and the backoff start over
    note_stop_alerted: bool = False  # the stop by request is reported now, once
    restart: int = 0  # RESTART: which consecutive restart this is
    next_allowed_at: float = 0.0  # RESTART: the backoff after it
    end_first: bool = False  # RESTART of a stalled job: its driver is ended first


def progressed_since_restart(book: Bookkeeping, health: Health) -> bool:
    """Whether the job made progress after its last restart: a batch committed after it, or an idle heartbeat of the
    restarted process (nothing to read, and healthy). Either resets the restart counter, also when the job has
    crashed again since (a job that crashes now and then while making progress never reaches `gave_up`)."""
    at = book.batch_at_restart
    if at is not None and health.last_batch_id is not None and health.last_batch_id > at:
        return True
    beat = health.heartbeat or {}
    return beat.get("status") == "idle" and book.pid_at_restart is not None and beat.get("pid") == book.pid_at_restart


def decide(snapshot: Snapshot) -> Decision:
    """The act and the report for the job, row by row (the first that applies)."""
    if snapshot.holder is not None and snapshot.holder.action:  # under a checkpoint action: neither ended nor started
        return Decision("refused", alert=f"not supervised now: {snapshot.holder.describe()}", severity="info")
    reset = snapshot.book.restarts > 0 and progressed_since_restart(snapshot.book, snapshot.health)
    if reset:
        snapshot = replace(snapshot, book=snapshot.book.cleared())
    return replace(_decide(snapshot), reset_restarts=reset)


def _decide(snapshot: Snapshot) -> Decision:
    health, book = snapshot.health, snapshot.book
    if health.healthy:
        return Decision("healthy")
    if book.stop_reason is not None:
        return _stopped_by_request(health, book)
    if health.running:
        breaches = [p for p in health.problems if p in STATE_HEALTH]
        others = [p for p in health.problems if p not in breaches]
        if breaches and "stalled" not in health.problems:
            return Decision("breached", alert=f"state health breached: {', '.join(breaches)}"
                            + (f" (also {', '.join(others)})" if others else "")
                            + f"; `lakehouse state {snapshot.job}` and the health report show where")
        if "stalled" not in health.problems:
            return Decision("alerted", alert=f"unhealthy: {', '.join(health.problems)}", severity="warning")
        also = [p for p in health.problems if p != "stalled"]
        reason = (f"stalled (pid {health.pid}): no heartbeat for {health.heartbeat_age_seconds or 0:.0f}s"
                  + (f", also {', '.join(also)}" if also else ""))
        return _restart(snapshot, reason)
    if snapshot.refusal is not None:
        return _not_startable(snapshot.refusal)
    status = (health.heartbeat or {}).get("status")
    if health.heartbeat is None or status in CLEAN_STATUSES:
        return Decision("started", Act.START, alert=f"not running ({'never started' if status is None else status})",
                        severity="info")
    return _restart(snapshot, f"not running: crashed (last heartbeat status {status!r}, batch {health.last_batch_id})")


def _stopped_by_request(health: Health, book: Bookkeeping) -> Decision:
    """A job stopped by request stays stopped: said once when it is down; a warning while it still runs unhealthy."""
    if health.running:
        return Decision("alerted", alert=f"asked to stop but still running with problems: {', '.join(health.problems)}",
                        severity="warning")
    if book.stop_alerted:
        return Decision("stopped")
    return Decision("stopped", alert=f"stopped by request ({book.stop_reason}); not started until started explicitly",
                    severity="info", note_stop_alerted=True)


def _not_startable(refusal: Refusal) -> Decision:
    """Down, and the preflight refuses its start: another writer took it (refused), its broker is down (waiting: no
    restart spent), or a person must act first (blocked: a checkpoint action, a plan, damaged files)."""
    if refusal.kind == "held":
        return Decision("refused", alert=f"start refused: {refusal.reason}", severity="info")
    if isinstance(refusal.error, BrokerDown):
        return Decision("waiting", alert=f"{refusal.error.down}: not started until it answers (its checkpoint keeps "
                                         "its place)", severity="warning")
    plan = refusal.plan
    if plan is not None and plan.mode == PENDING:
        return Decision("blocked", alert=f"not started: {plan.note}")
    if plan is not None:
        return Decision("blocked", alert=f"not started: its checkpoint plan is {plan.mode} "
                                         f"({', '.join(c.field for c in plan.changes)} changed in the registry); "
                                         f"apply it with `{plan.command}` first")
    return Decision("blocked", alert=f"not started: {refusal.reason}")


def _restart(snapshot: Snapshot, reason: str) -> Decision:
    """Crashed or stalled: restart it per its policy (alert only; give up after max_restarts; back off)."""
    policy, book, health = snapshot.policy, snapshot.book, snapshot.health
    if policy.on_down != "restart":
        return Decision("alerted", alert=f"{reason}; policy on_down={policy.on_down}: not restarting")
    if book.restarts >= policy.max_restarts:
        return Decision("gave_up", alert=f"{reason}; gave up after {book.restarts} consecutive restarts "
                                         f"(max_restarts {policy.max_restarts})")
    wait = book.next_allowed_at - snapshot.now
    if wait > 0:
        return Decision("backing_off", alert=f"{reason}; restart {book.restarts + 1} allowed in {wait:.0f}s (backoff)",
                        severity="warning")
    restart = book.restarts + 1
    return Decision("restarted", Act.RESTART, alert=reason, restart=restart,
                    next_allowed_at=snapshot.now + policy.backoff_seconds * 2 ** (restart - 1),
                    end_first=health.running)
