"""A group of live jobs in one driver (`lakehouse run --group <name>`): a streaming query per job, side by side, each
in a thread and a SparkSession of its own (their session settings differ), each with its own lease, heartbeat,
progress records, summary line and stop request, as when it runs alone.

The driver holds the group's lease (one driver per group). A job that fails or is refused ends alone: its siblings
go on, and the supervisor (`lakehouse_live`) decides about it as about a job running alone; restarting it is a
start request (include/records/job_requests.py) that this driver picks up, without a new JVM. One failure is the
machine's, not the job's, and this driver restarts that query itself, with backoff: Spark's Python worker not
starting within Spark's fixed 10 s (a transformWithState query's first batch starts one) while the group's queries
start together on a busy machine. A job stopped by request stays stopped. The driver ends when none of its jobs
runs any more, or on SIGTERM / SIGINT (every query stops at its batch boundary).
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from include.checkpoints import latest_committed_batch
from include.checkpoints.preflight import preflight
from include.failures import ExitCode, classify_failure
from include.records import groups, job_requests, lease, run_outcomes
from include.records.bookkeeping import read_state
from include.records.heartbeats import read_heartbeat
from include.registry import Registry, StatefulProcess, Trigger, load_registry
from include.settings import Settings
from include.spark_session import query_session
from spark_jobs.driver import SharedDriver
from spark_jobs.run_result import python_worker_timed_out

log = logging.getLogger("lakehouse")

POLL_SECONDS = 1.0
START_SECONDS = 30.0  # at most this long for one query's thread to take its lease before the next one starts
# a query whose Python worker did not start in time is started again after these pauses, then left to the supervisor
WORKER_RETRY_SECONDS = (10.0, 20.0, 40.0)
SETTLE_SECONDS = 120.0  # at most this long a query starting a Python worker waits for its siblings' first batches


class GroupHeld(lease.LeaseHeld):
    """Another process runs the group's driver."""


def acquire_group(settings: Settings, group: str, trigger: str) -> lease.Lease:
    path = settings.layout.group_lease(group)
    try:
        return lease.acquire(settings, f"group {group}", trigger=trigger, path=path)
    except lease.LeaseHeld:
        owner = lease.read_lease(settings, group, path) or lease.Owner(group)
        raise GroupHeld(f"group {group!r} already runs: pid {owner.pid} on {owner.host} holds its "
                        f"driver lease since {owner.acquired_at}; start one of its jobs with `lakehouse_live`'s "
                        "`start` param (or `lakehouse stop` it)") from None


class GroupDriver:
    """The queries of one group in this driver."""

    def __init__(self, settings: Settings, registry: Registry, group: str, trigger: Trigger | None,
                 driver: SharedDriver):
        self.settings, self.registry, self.group, self.trigger, self.driver = settings, registry, group, trigger, driver
        self.members = registry.group_members(group)
        self.threads: dict[str, threading.Thread] = {}
        self.failures: list[int] = []
        self.outcomes = groups.outcomes(settings, group)
        self.waiting_since: dict[str, float] = {}  # jobs waiting for their siblings' first batches (may_start)
        self.committed_before: dict[str, int | None] = {}  # each job's last committed batch when it started here

    def run(self) -> int:
        held = acquire_group(self.settings, self.group, str(self.trigger or "live"))
        log.info("group=%s: driver of %s", self.group, ", ".join(self.members))
        wanted = list(self.members)
        try:
            while True:
                held.renew()
                if held.lost:  # another driver took the group over: this one's queries stop (each guards itself)
                    log.error("group=%s: %s; stopping every query of this driver", self.group, held.lost)
                    self.driver.stop.set()
                for job_id in self.members:
                    if job_requests.pending(self.settings, job_id, "start"):
                        job_requests.clear(self.settings, job_id, "start")
                        log.info("group=%s: start of %s requested", self.group, job_id)
                        if job_id not in wanted:
                            wanted.append(job_id)
                waiting = []
                while wanted and not self.driver.stop.is_set():
                    job_id = wanted.pop(0)
                    if read_state(self.settings, job_id).get("stopped_by_request"):
                        log.info("group=%s: %s stays stopped (stopped by request)", self.group, job_id)
                    elif self.may_start(job_id):
                        self.start(job_id)
                    else:
                        waiting.append(job_id)
                wanted = waiting
                if self.driver.stop.is_set() or not (self.running() or wanted):
                    break
                self.driver.stop.wait(POLL_SECONDS)
            for thread in self.threads.values():
                thread.join()
        finally:
            held.release()
        log.info("group=%s: driver ends (%s)", self.group,
                 "stop requested" if self.driver.stop.is_set() else "none of its jobs runs")
        return self.failures[0] if self.failures else ExitCode.OK

    def running(self) -> list[str]:
        return [j for j, t in self.threads.items() if t.is_alive()]

    def may_start(self, job_id: str) -> bool:
        """False while a job whose first batch starts a Python worker in this driver (a transformWithState query's)
        waits for the first batches of the queries running here, at most SETTLE_SECONDS: Spark waits 10 s only for
        that worker, and beside its siblings' first plans on a busy machine it took longer (bench/live_fleet.py)."""
        if self.registry.job(job_id).transform_kind != StatefulProcess.kind:
            return True
        first = [j for j in self.running() if j != job_id and self.before_first_batch(j)]
        if first and job_id not in self.waiting_since:
            log.info("group=%s: %s starts after the first batch of %s (its own first batch starts a Python worker)",
                     self.group, job_id, ", ".join(first))
        since = self.waiting_since.setdefault(job_id, time.monotonic())
        if first and time.monotonic() - since < SETTLE_SECONDS:
            return False
        del self.waiting_since[job_id]
        return True

    def before_first_batch(self, job_id: str) -> bool:
        """Whether the job's query, started here, has neither committed a batch nor reported an idle trigger yet (its
        checkpoint first: the progress listener's heartbeat lags on a busy driver)."""
        if latest_committed_batch(self.settings.layout.checkpoint(job_id)) != self.committed_before.get(job_id):
            return False
        return (read_heartbeat(self.settings, job_id) or {}).get("status") in (None, "starting", "started")

    def start(self, job_id: str) -> None:
        """Start the job's query in a thread of its own, unless it runs here already or cannot run now (one line
        saying why, and its outcome recorded)."""
        if job_id in self.running():
            return
        try:
            # The registry as it is now: a job started again after a checkpoint action runs its new definition
            # (which jobs the group holds is fixed when its driver starts)
            self.registry = load_registry(self.settings.registry_path)
            job = self.registry.job(job_id)
            preflight(self.settings, self.registry, job)
        except Exception as exc:
            self.ended(job_id, exc)
            return

        self.committed_before[job_id] = latest_committed_batch(self.settings.layout.checkpoint(job_id))
        spark = self.driver.session(f"lakehouse-group-{self.group}")  # in this (main) thread: it installs handlers
        thread = threading.Thread(target=self.run_query, args=(job_id, query_session(spark), self.registry),
                                  name=f"query-{job_id}", daemon=True)
        self.threads[job_id] = thread
        thread.start()
        self.await_lease(job_id, thread)

    def run_query(self, job_id: str, spark, registry: Registry) -> None:
        from spark_jobs.streaming_query import run_job

        trigger = self.trigger or registry.job(job_id).triggers["live"]
        pauses = list(WORKER_RETRY_SECONDS)
        while True:
            try:
                result = run_job(spark, self.settings, registry, job_id, trigger, stop_requested=self.driver.stop)
                break
            except Exception as exc:
                if not (pauses and python_worker_timed_out(str(exc))):
                    self.ended(job_id, exc)
                    return
                pause = pauses.pop(0)
                log.warning("group=%s: %s: Spark's Python worker did not start within Spark's 10 s (the machine is "
                            "busy); the query starts again in %.0f s, from its checkpoint", self.group, job_id, pause)
                if self.driver.stop.wait(pause) or read_state(self.settings, job_id).get("stopped_by_request"):
                    self.ended(job_id, exc)
                    return
        run_outcomes.record(self.outcomes, run_outcomes.Outcome(job_id, result.status, summary=result.summary))
        log.info("group=%s: %s %s", self.group, job_id, result.status)

    def ended(self, job_id: str, exc: Exception) -> None:
        """A job that failed or was refused: one line, its outcome recorded; its siblings go on."""
        code, line = classify_failure(exc) or (ExitCode.FAILED, str(exc).splitlines()[0][:500])
        if code != ExitCode.REFUSED:
            log.error("job=%s failed", job_id, exc_info=exc)
            self.failures.append(code)
        sys.stderr.write(f"lakehouse run: {job_id}: {line}\n")
        status = "refused" if code == ExitCode.REFUSED else "failed"
        run_outcomes.record(self.outcomes, run_outcomes.Outcome(job_id, status, line))
        log.info("group=%s: %s %s; the other jobs of the group go on", self.group, job_id, status)

    def await_lease(self, job_id: str, thread: threading.Thread) -> None:
        """Let the job's thread take its lease before the next one starts, so that the group's jobs take theirs in
        its order; their queries then plan and run their first batches together (started each after the one before
        had planned, the last of six began minutes after the first: bench/live_fleet.py)."""
        deadline = time.monotonic() + START_SECONDS
        while thread.is_alive() and time.monotonic() < deadline and not self.driver.stop.is_set():
            owner = lease.holder(self.settings, job_id)
            if owner is not None and owner.mine(self.settings.host_name):
                return
            time.sleep(0.2)


def run_group(settings: Settings, registry: Registry, group: str, trigger: Trigger | None,
              driver: SharedDriver) -> int:
    """Run the group's live jobs in this driver until none runs or a stop is requested; the first failure's exit
    code (0 when every job ended by request)."""
    return GroupDriver(settings, registry, group, trigger, driver).run()
