"""Live job supervision: the library behind the `lakehouse_live` DAG.

A live job is a detached `lakehouse run <job> --trigger <live trigger>` process in its own session.
Whether it runs is read from its checkpoint lease (include.lease); how healthy it is from its
heartbeat and its recent rows in `_ops/query_progress`. :func:`supervise_job` acts on that per the
job's `supervision` policy and keeps its bookkeeping (consecutive restarts, next allowed restart,
batch at the last restart, stopped-by-request) in `_ops/supervisor/<job>.json`. Every action other
than "healthy" is also a row in `_ops/alerts`.

The one-writer guarantee is the lease the job process takes itself: this module only avoids
pointless starts and reports a refused one as "refused".
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.compute as pc

from include import checkpoints, delta_store, lease
from include.files import read_json, write_json_atomically
from include.observability import PROGRESS_TABLE, read_heartbeat
from include.registry import JobSpec, Registry
from include.settings import REPO_ROOT, Settings

log = logging.getLogger(__name__)

ALERTS_TABLE = "alerts"
ALERT_SCHEMA: dict[str, str] = {
    "raised_at": "timestamp",
    "job": "string",
    "dag_id": "string",
    "task_id": "string",
    "run_id": "string",
    "severity": "string",
    "reason": "string",
}
ACTIONS = ("healthy", "started", "restarted", "backing_off", "gave_up", "alerted", "refused", "stopped")
STATEFUL_KINDS = ("deduplicate", "window_aggregate", "session_aggregate", "stream_join")
CLEAN_STATUSES = ("stopped", "finished")  # heartbeat statuses of a job that ended on purpose
REFUSAL_MARK = "refusing a second writer"  # what a refused `lakehouse run` says (include.lease)
START_TIMEOUT_SECONDS = 180.0  # JVM start + taking the lease
TERM_GRACE_SECONDS = 10.0  # SIGTERM -> SIGKILL when ending a stalled job
POLL_SECONDS = 0.2
MIN_BATCHES_FOR_MEDIAN = 3  # slow_batches needs at least this many batches in the window

# Processes started by this interpreter, kept so they are reaped (no zombies) and their exit codes
# stay readable; an Airflow task process is short-lived, so this never grows much.
_LAUNCHED: dict[int, subprocess.Popen] = {}


@dataclass
class Health:
    """What :func:`check_job` found; `problems` uses the names documented in :func:`check_job`."""

    job: str
    running: bool
    pid: int | None = None
    heartbeat: dict | None = None
    heartbeat_age_seconds: float | None = None
    last_batch_id: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.running and not self.problems


# --- alerts --------------------------------------------------------------------------------------

def record_alert(
    settings: Settings,
    job: str,
    reason: str,
    *,
    dag_id: str = "",
    task_id: str = "",
    run_id: str = "",
    severity: str = "error",
) -> None:
    """Append one row to the `_ops/alerts` Delta table and log it."""
    level = {"info": logging.INFO, "warning": logging.WARNING}.get(severity, logging.ERROR)
    log.log(level, "alert job=%s severity=%s dag=%s task=%s run=%s: %s", job, severity, dag_id, task_id, run_id, reason)
    row = {
        "raised_at": datetime.now(UTC), "job": job, "dag_id": dag_id, "task_id": task_id,
        "run_id": run_id, "severity": severity, "reason": reason,
    }
    delta_store.append_rows(settings.ops_table(ALERTS_TABLE), ALERT_SCHEMA, [row])


# --- supervisor bookkeeping ----------------------------------------------------------------------

def state_path(settings: Settings, job_id: str) -> Path:
    return settings.root / "_ops" / "supervisor" / f"{job_id}.json"


def read_state(settings: Settings, job_id: str) -> dict:
    """The supervisor's bookkeeping for a job ({} when there is none)."""
    return read_json(state_path(settings, job_id)) or {}


def _update_state(settings: Settings, job_id: str, **changes) -> dict:
    """Merge `changes` into the job's bookkeeping (a value of None removes the key); atomic write."""
    state = read_state(settings, job_id)
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    write_json_atomically(state_path(settings, job_id), state)
    return state


def log_path(settings: Settings, job_id: str) -> Path:
    return settings.root / "_ops" / "logs" / f"{job_id}.log"


# --- starting and stopping -----------------------------------------------------------------------

def start_job(settings: Settings, registry: Registry, job_id: str) -> int:
    """Launch the job detached with its live trigger and return its pid once it holds the lease.

    `settings.registry_path` must be the file `registry` was loaded from: the child reads it.
    Clears a stopped-by-request flag. Raises LeaseHeld when another process holds the lease
    (before launching, or when the child itself was refused), RuntimeError when the child died
    or did not take the lease in time.
    """
    job = registry.job(job_id)
    trigger = str(job.triggers["live"])
    if lease.is_held(settings, job_id):
        raise lease.LeaseHeld(lease.describe_holder(job_id, lease.read_lease(settings, job_id)))
    if read_state(settings, job_id).get("stopped_by_request"):
        log.info("job=%s: started explicitly, clearing its stopped-by-request flag", job_id)
        _update_state(settings, job_id, stopped_by_request=None)
    for child in _LAUNCHED.values():
        child.poll()  # reap finished children
    env = {
        **os.environ,
        "LAKEHOUSE_ROOT": str(settings.root),
        "LAKEHOUSE_REGISTRY": str(settings.registry_path),
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "include.cli", "run", job_id, "--trigger", trigger]
    path = log_path(settings, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        offset = out.tell()
        out.write(f"--- {datetime.now(UTC).isoformat(timespec='seconds')} supervisor: {' '.join(command[1:])}\n".encode())
        out.flush()
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _LAUNCHED[process.pid] = process
    log.info("job=%s: launched pid %s (%s), log %s", job_id, process.pid, trigger, path)

    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        owner = lease.read_lease(settings, job_id)
        code = process.poll()
        if code is None and owner and owner.get("pid") == process.pid and owner.get("host") == socket.gethostname():
            log.info("job=%s: running as pid %s (holds its checkpoint lease)", job_id, process.pid)
            return process.pid
        if code is not None:
            written = _read_from(path, offset)
            refusal = next((line for line in written.splitlines() if REFUSAL_MARK in line), None)
            if code == 2 and (refusal or lease.is_held(settings, job_id)):
                message = refusal or lease.describe_holder(job_id, lease.read_lease(settings, job_id))
                raise lease.LeaseHeld(f"{message} (new process {process.pid} exited)")
            tail = "\n".join(written.splitlines()[-40:])
            raise RuntimeError(f"job {job_id!r}: pid {process.pid} exited with code {code} while starting; "
                               f"end of {path}:\n{tail}")
        if time.monotonic() >= deadline:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            raise RuntimeError(f"job {job_id!r}: pid {process.pid} did not take its checkpoint lease within "
                               f"{START_TIMEOUT_SECONDS:.0f}s and was killed; see {path}")
        time.sleep(POLL_SECONDS)


def stop_job(settings: Settings, job_id: str, reason: str, wait_seconds: float = 0.0) -> bool:
    """Ask the running job to stop at its next batch boundary; it stays stopped until started.

    Returns True when the job is not running (anymore); with `wait_seconds` > 0, waits that long
    for its lease to be released.
    """
    _update_state(settings, job_id, stopped_by_request={"reason": reason, "requested_at": time.time()})
    if not lease.is_held(settings, job_id):
        log.info("job=%s is not running; marked stopped (%s)", job_id, reason)
        return True
    request = lease.request_stop(settings, job_id, reason)
    log.info("job=%s: stop requested (%s)", job_id, reason)
    deadline = time.monotonic() + max(wait_seconds, 0.0)
    while lease.is_held(settings, job_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    request.unlink(missing_ok=True)  # normally removed by the job; not when it ended on its own meanwhile
    log.info("job=%s stopped", job_id)
    return True


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _signal_group(pid: int, signum: int) -> None:
    """Signal the process group led by `pid` (jobs run in their own session), else just `pid`."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_released(settings: Settings, job_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while lease.is_held(settings, job_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def _end_stalled(settings: Settings, job_id: str, pid: int | None) -> bool:
    """SIGTERM the stalled job's driver, SIGKILL its process group after a grace; True once the lease is free.

    Safe because every batch commit is exactly-once: a killed batch replays on restart.
    """
    owner = lease.read_lease(settings, job_id)
    if pid is None or not owner or owner.get("pid") != pid or owner.get("host") != socket.gethostname():
        return False  # held from another host (or changed hands meanwhile): not ours to kill
    log.warning("job=%s: ending stalled pid %s", job_id, pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not _wait_released(settings, job_id, TERM_GRACE_SECONDS):
        _signal_group(pid, signal.SIGKILL)
    released = _wait_released(settings, job_id, 30.0)
    if pid in _LAUNCHED:
        _LAUNCHED[pid].poll()
    return released


# --- health --------------------------------------------------------------------------------------

def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    moment = datetime.fromisoformat(str(text))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def recent_batches(settings: Settings, job_id: str, query_id: str | None, limit: int) -> list[dict]:
    """The last `limit` batches of the query in `_ops/query_progress`, oldest first (replays deduplicated)."""
    path = settings.ops_table(PROGRESS_TABLE)
    if query_id is None or limit <= 0 or not delta_store.table_exists(path):
        return []
    table = delta_store.read_table(path)
    table = table.filter(pc.and_(pc.equal(table["job"], job_id), pc.equal(table["query_id"], query_id)))
    latest: dict[int, dict] = {}
    for row in sorted(table.to_pylist(), key=lambda r: (r["batch_id"], r["progress_time"] or datetime.min.replace(tzinfo=UTC))):
        latest[row["batch_id"]] = row  # a batch replayed after a crash: keep its last record
    return [latest[b] for b in sorted(latest)][-limit:]


def diagnose(job: JobSpec, batches: list[dict]) -> list[str]:
    """Problems in a job's recent progress rows (oldest first, at most one window).

    slow_batches: median batch duration above the live trigger interval (at least 3 batches);
    falling_behind: mean input rate above mean processing rate over batches with input;
    state_growing: state rows strictly increasing with none removed (full window);
    watermark_stuck: input but no watermark advance (full window, stateful transforms only).
    """
    problems: list[str] = []
    if not batches:
        return problems
    interval_ms = job.triggers["live"].interval_seconds * 1000
    durations = [b["batch_duration_ms"] for b in batches if b["batch_duration_ms"] is not None]
    # A median of fewer batches would flag a run's first (warm-up or backlog) batch.
    if interval_ms and len(durations) >= MIN_BATCHES_FOR_MEDIAN and statistics.median(durations) > interval_ms:
        problems.append("slow_batches")
    with_input = [b for b in batches if b["num_input_rows"]]
    if with_input:
        incoming = statistics.mean(b["input_rows_per_second"] or 0.0 for b in with_input)
        processed = statistics.mean(b["processed_rows_per_second"] or 0.0 for b in with_input)
        if incoming > processed:
            problems.append("falling_behind")
    full = len(batches) >= max(job.supervision.health_window_batches, 2)
    if full:
        totals = [b["state_rows_total"] or 0 for b in batches]
        removed = sum(b["state_rows_removed"] or 0 for b in batches)
        if removed == 0 and all(a < b for a, b in zip(totals, totals[1:], strict=False)):
            problems.append("state_growing")
    if full and job.transform_kind in STATEFUL_KINDS:
        # Input in a batch moves the watermark of a later batch, so the last batch's input does not count.
        fed = any(b["num_input_rows"] for b in batches[:-1])
        first, last = batches[0]["watermark"], batches[-1]["watermark"]
        if fed and (last is None or (first is not None and last <= first)):
            problems.append("watermark_stuck")
    return problems


def check_job(settings: Settings, registry: Registry, job_id: str, now: float | None = None) -> Health:
    """Is the job running (its lease held by a live process), and what is wrong with it.

    Problems: "stalled" (running, heartbeat older than supervision.stall_after_seconds, 0 meaning
    6 live trigger intervals), and from the query's last `health_window_batches` batches:
    "slow_batches", "falling_behind", "state_growing", "watermark_stuck" (see :func:`diagnose`;
    reported even when the job is not running). `now` (epoch seconds): look as of another time.
    """
    job = registry.job(job_id)
    now = time.time() if now is None else now
    running = lease.is_held(settings, job_id)
    owner = lease.read_lease(settings, job_id) if running else None
    pid = owner.get("pid") if owner else None
    beat = read_heartbeat(settings, job_id)
    updated = _epoch(beat.get("updated_at")) if beat else None
    query_id = (beat or {}).get("query_id") or checkpoints.query_id(settings.checkpoint_dir(job_id))
    batches = recent_batches(settings, job_id, query_id, job.supervision.health_window_batches)
    last_batch_id = (beat or {}).get("batch_id")
    if last_batch_id is None and batches:
        last_batch_id = batches[-1]["batch_id"]
    health = Health(
        job=job_id, running=running, pid=pid, heartbeat=beat,
        heartbeat_age_seconds=None if updated is None else now - updated, last_batch_id=last_batch_id,
    )
    if running:
        # A heartbeat left by an earlier process says nothing about this one: then count from its start.
        own_beat = beat is not None and (pid is None or beat.get("pid") == pid)
        since = updated if own_beat else _epoch((owner or {}).get("acquired_at"))
        stall_after = job.supervision.stall_after_seconds or 6 * job.triggers["live"].interval_seconds
        if since is not None and now - since > stall_after:
            health.problems.append("stalled")
    health.problems += diagnose(job, batches)
    return health


# --- the policy ----------------------------------------------------------------------------------

def supervise_job(settings: Settings, registry: Registry, job_id: str, run_id: str = "") -> str:
    """Check the job and act per its supervision policy; returns one of :data:`ACTIONS`.

    healthy; started (was not running: never started, or stopped cleanly); restarted (crashed, or
    stalled and ended first); backing_off (restart not allowed yet); gave_up (max_restarts
    consecutive restarts done); alerted (unhealthy, alert-only policy or a problem a restart does
    not fix); refused (another writer holds the lease); stopped (stopped by request, stays so).
    """
    job = registry.job(job_id)
    policy = job.supervision
    health = check_job(settings, registry, job_id)
    state = read_state(settings, job_id)

    def alert(reason: str, severity: str = "error") -> None:
        record_alert(settings, job_id, reason, dag_id="lakehouse_live", task_id=f"supervise_{job_id}",
                     run_id=run_id, severity=severity)

    if health.healthy:
        restarts = int(state.get("restarts", 0))
        batch_at_restart = state.get("batch_at_restart")
        if restarts and health.last_batch_id is not None and (
            batch_at_restart is None or health.last_batch_id > batch_at_restart
        ):
            log.info("job=%s healthy at batch %s after a restart: backoff reset", job_id, health.last_batch_id)
            _update_state(settings, job_id, restarts=0, next_allowed_at=None, batch_at_restart=None)
        return "healthy"

    stop = state.get("stopped_by_request")
    if stop:
        if not health.running:
            alert(f"stopped by request ({stop.get('reason', '')}); not started until started explicitly", "info")
            return "stopped"
        alert(f"asked to stop but still running with problems: {', '.join(health.problems)}", "warning")
        return "alerted"

    status = (health.heartbeat or {}).get("status")
    if health.running:
        if "stalled" not in health.problems:
            alert(f"unhealthy: {', '.join(health.problems)}", "warning")
            return "alerted"
        reason = (f"stalled (pid {health.pid}): no heartbeat for {health.heartbeat_age_seconds or 0:.0f}s"
                  + (f", also {', '.join(p for p in health.problems if p != 'stalled')}"
                     if len(health.problems) > 1 else ""))
    elif health.heartbeat is None or status in CLEAN_STATUSES:
        try:
            pid = start_job(settings, registry, job_id)
        except lease.LeaseHeld as refused:
            alert(f"start refused: {refused}", "info")
            return "refused"
        alert(f"not running ({'never started' if status is None else status}); started as pid {pid}", "info")
        return "started"
    else:
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
    if health.running and not _end_stalled(settings, job_id, health.pid):
        alert(f"{reason}; could not end it (not a process of this host, or it would not die)")
        return "alerted"

    # Count the attempt before starting, so a job that dies while starting still backs off.
    restarts += 1
    _update_state(
        settings, job_id, restarts=restarts,
        next_allowed_at=time.time() + policy.backoff_seconds * 2 ** (restarts - 1),
        batch_at_restart=health.last_batch_id if health.last_batch_id is not None else -1,
    )
    try:
        pid = start_job(settings, registry, job_id)
    except lease.LeaseHeld as refused:
        _update_state(settings, job_id, restarts=restarts - 1 or None,
                      next_allowed_at=state.get("next_allowed_at"), batch_at_restart=state.get("batch_at_restart"))
        alert(f"{reason}; restart refused: {refused}", "info")
        return "refused"
    alert(f"{reason}; restarted as pid {pid} (consecutive restart {restarts} of at most {policy.max_restarts})")
    return "restarted"
