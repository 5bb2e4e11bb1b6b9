"""The live supervisor's decision table (include/ops/decision.py), row by row, in this process: a snapshot in, a
decision out; no Spark, no Airflow, no file. tests/test_supervision.py carries the decisions out on real jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from include.checkpoints.journal import ActionPending
from include.checkpoints.plan import PENDING, Change, Plan, PlanRequired
from include.checkpoints.preflight import BrokerDown, CheckpointConflict, Refusal, SourceUncapturable
from include.checkpoints.validate import CheckpointDamaged
from include.ops.decision import Act, Bookkeeping, Decision, Snapshot, decide
from include.ops.health import Health
from include.records.lease import LeaseHeld, Owner
from include.registry.specs import SupervisionSpec

JOB = "silver_clickstream"
NOW = 1_000_000.0
POLICY = SupervisionSpec(on_down="restart", max_restarts=3, backoff_seconds=30)
FRESH = Bookkeeping()


def seen(*, running: bool = False, problems: tuple[str, ...] = (), heartbeat: dict | None = None,
         last_batch: int | None = 7, holder: Owner | None = None, book: Bookkeeping = FRESH,
         refusal: Refusal | None = None, policy: SupervisionSpec = POLICY) -> Snapshot:
    health = Health(job=JOB, running=running, pid=41 if running else None, heartbeat=heartbeat,
                    heartbeat_age_seconds=95.0 if heartbeat else None, last_batch_id=last_batch,
                    problems=list(problems))
    return Snapshot(JOB, policy, health, holder, book, refusal, NOW)


RUNNING = {"status": "running", "pid": 41}
CRASHED = {"status": "failed", "pid": 40}


def test_a_job_under_a_checkpoint_action_is_neither_ended_nor_started():
    action = Owner(JOB, pid=9, host="h", acquired_at="t", expires_at=NOW + 60, action="checkpoint rollback by ann")
    decision = decide(seen(running=True, problems=("stalled",), heartbeat=RUNNING, holder=action))
    assert (decision.action, decision.act, decision.severity) == ("refused", Act.LEAVE, "info")
    assert decision.alert.startswith("not supervised now: job 'silver_clickstream' is under a checkpoint action")


def test_a_healthy_job_is_left_alone_and_nothing_is_reported():
    assert decide(seen(running=True, heartbeat=RUNNING)) == Decision("healthy")


def test_progress_since_the_last_restart_resets_the_counter_before_anything_else():
    spent = Bookkeeping(restarts=3, next_allowed_at=NOW + 500, batch_at_restart=5, pid_at_restart=40)
    assert decide(seen(running=True, heartbeat=RUNNING, book=spent)) == Decision("healthy", reset_restarts=True)
    # it crashed again since: a restart at once, the first of a new count, not gave_up after 3
    again = decide(seen(heartbeat=CRASHED, book=spent))
    assert (again.action, again.act, again.restart, again.reset_restarts) == ("restarted", Act.RESTART, 1, True)


@pytest.mark.parametrize(("alerted", "alert"), [
    (False, "stopped by request (maintenance); not started until started explicitly"), (True, "")])
def test_a_job_stopped_by_request_stays_stopped_and_is_reported_once(alerted, alert):
    decision = decide(seen(heartbeat={"status": "stopped"}, book=Bookkeeping(stop_reason="maintenance",
                                                                             stop_alerted=alerted)))
    assert (decision.action, decision.act, decision.alert) == ("stopped", Act.LEAVE, alert)
    assert decision.note_stop_alerted is not alerted


def test_a_job_stopped_by_request_but_running_unhealthy_is_a_warning():
    decision = decide(seen(running=True, problems=("slow_batches",), heartbeat=RUNNING,
                           book=Bookkeeping(stop_reason="maintenance")))
    assert (decision.action, decision.act, decision.severity) == ("alerted", Act.LEAVE, "warning")
    assert decision.alert == "asked to stop but still running with problems: slow_batches"


def test_a_running_job_whose_state_health_is_breached_is_reported_not_restarted():
    decision = decide(seen(running=True, problems=("slow_batches", "state_growing"), heartbeat=RUNNING))
    assert (decision.action, decision.act, decision.severity) == ("breached", Act.LEAVE, "error")
    assert decision.alert == ("state health breached: state_growing (also slow_batches); `lakehouse state "
                              "silver_clickstream` and the health report show where")


def test_a_running_job_with_other_problems_is_a_warning():
    decision = decide(seen(running=True, problems=("falling_behind",), heartbeat=RUNNING))
    assert (decision.action, decision.act, decision.alert, decision.severity) == (
        "alerted", Act.LEAVE, "unhealthy: falling_behind", "warning")


def test_a_stalled_job_is_ended_then_restarted():
    decision = decide(seen(running=True, problems=("stalled", "slow_batches"), heartbeat=RUNNING))
    assert (decision.action, decision.act, decision.end_first, decision.restart) == ("restarted", Act.RESTART, True, 1)
    assert decision.alert == "stalled (pid 41): no heartbeat for 95s, also slow_batches"
    assert decision.next_allowed_at == NOW + 30


@pytest.mark.parametrize("heartbeat", [None, {"status": "stopped"}, {"status": "finished"}])
def test_a_job_that_never_ran_or_ended_on_purpose_is_started(heartbeat):
    decision = decide(seen(heartbeat=heartbeat))
    assert (decision.action, decision.act, decision.severity, decision.restart) == ("started", Act.START, "info", 0)
    assert decision.alert == f"not running ({heartbeat['status'] if heartbeat else 'never started'})"


def test_a_crashed_job_is_restarted_with_its_backoff_counted():
    decision = decide(seen(heartbeat=CRASHED, book=Bookkeeping(restarts=2, next_allowed_at=NOW - 1)))
    assert (decision.action, decision.act, decision.restart, decision.end_first) == ("restarted", Act.RESTART, 3, False)
    assert decision.next_allowed_at == NOW + 30 * 4  # doubled per consecutive restart
    assert decision.alert == "not running: crashed (last heartbeat status 'failed', batch 7)"


def test_a_crashed_job_under_an_alert_only_policy_is_reported():
    decision = decide(seen(heartbeat=CRASHED, policy=replace(POLICY, on_down="alert")))
    assert (decision.action, decision.act) == ("alerted", Act.LEAVE)
    assert decision.alert.endswith("; policy on_down=alert: not restarting")


def test_a_job_restarted_max_restarts_times_is_given_up():
    decision = decide(seen(heartbeat=CRASHED, book=Bookkeeping(restarts=3, batch_at_restart=7)))
    assert (decision.action, decision.act, decision.severity) == ("gave_up", Act.LEAVE, "error")
    assert decision.alert.endswith("; gave up after 3 consecutive restarts (max_restarts 3)")


def test_a_restart_within_its_backoff_waits():
    decision = decide(seen(heartbeat=CRASHED, book=Bookkeeping(restarts=1, next_allowed_at=NOW + 42,
                                                               batch_at_restart=7)))
    assert (decision.action, decision.act, decision.severity) == ("backing_off", Act.LEAVE, "warning")
    assert decision.alert.endswith("; restart 2 allowed in 42s (backoff)")


PLAN = Plan(JOB, "repartition", (Change("state_store.shuffle_partitions", 2, 4, "repartition", "more partitions"),))


@pytest.mark.parametrize(("refusal", "action", "severity", "alert"), [
    (Refusal("held", LeaseHeld("job 'silver_clickstream' is already running")), "refused", "info",
     "start refused: job 'silver_clickstream' is already running"),
    (Refusal("broker", BrokerDown(JOB, "broker unreachable at 127.0.0.1:9")), "waiting", "warning",
     "broker unreachable at 127.0.0.1:9: not started until it answers (its checkpoint keeps its place)"),
    (Refusal("plan", PlanRequired(PLAN)), "blocked", "error",
     "not started: its checkpoint plan is repartition (state_store.shuffle_partitions changed in the registry); "
     "apply it with `lakehouse checkpoint repartition silver_clickstream` first"),
    (Refusal("plan", PlanRequired(Plan(JOB, PENDING, note="rollback by ann, unfinished"))), "blocked", "error",
     "not started: rollback by ann, unfinished"),
    (Refusal("action", ActionPending("job 'silver_clickstream' may not start: rollback")), "blocked", "error",
     "not started: job 'silver_clickstream' may not start: rollback"),
    (Refusal("damaged", CheckpointDamaged("offsets/3 is truncated")), "blocked", "error",
     "not started: offsets/3 is truncated"),
    (Refusal("checkpoint", CheckpointConflict("no checkpoint, but rows")), "blocked", "error",
     "not started: no checkpoint, but rows"),
    (Refusal("source", SourceUncapturable("job 'bronze_customers': table public.customers is missing")), "blocked",
     "error", "not started: job 'bronze_customers': table public.customers is missing"),
], ids=["held", "broker", "plan", "pending-plan", "action", "damaged", "checkpoint", "source"])
def test_a_job_down_that_may_not_start_is_not_started_and_spends_no_restart(refusal, action, severity, alert):
    for heartbeat in (None, CRASHED):  # never ran, or crashed: the preflight comes first either way
        decision = decide(seen(heartbeat=heartbeat, refusal=refusal, book=Bookkeeping(restarts=1, batch_at_restart=7)))
        assert (decision.action, decision.act, decision.severity, decision.alert, decision.restart) == (
            action, Act.LEAVE, severity, alert, 0)


def test_the_bookkeeping_reads_the_supervisors_record():
    book = Bookkeeping.from_state({"restarts": 2, "next_allowed_at": NOW, "batch_at_restart": -1,
                                   "pid_at_restart": 8, "stopped_by_request": {"reason": "x", "alerted": True}})
    assert book == Bookkeeping(2, NOW, -1, 8, "x", True)
    assert Bookkeeping.from_state({}) == Bookkeeping()
    assert book.cleared() == Bookkeeping(0, 0.0, None, None, "x", True)
