"""Live job processes: start one detached (through the one launch path, :mod:`include.ops.launch`),
ask one to stop, end a stalled one.

A live job is a detached spark-submit of `spark_jobs/entrypoints/run_job.py` in its own session (so its process
group holds the driver and its JVM). Whether it runs is read from its checkpoint lease, whose owner is
the Python driver.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from include.ops import lease, stop_requests
from include.ops.bookkeeping import read_state, update_state
from include.ops.launch import ExitCode, job_environment, spark_submit_command
from include.registry import Registry
from include.settings import REPO_ROOT, Settings

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 180.0  # JVM start + taking the lease
TERM_GRACE_SECONDS = 10.0  # SIGTERM -> SIGKILL when ending a stalled job
POLL_SECONDS = 0.2

# Processes started by this interpreter (by pid = their process group), kept so they are reaped (no
# zombies) and their exit codes stay readable; an Airflow task process is short-lived, so this never
# grows much.
LAUNCHED: dict[int, subprocess.Popen] = {}


def start_job(settings: Settings, registry: Registry, job_id: str) -> int:
    """Launch the job detached with its live trigger and return its pid once it holds the lease.

    `settings.registry_path` must be the file `registry` was loaded from: the child reads it.
    Returns the pid of the job's driver (the lease owner). Clears a stopped-by-request flag. Raises
    LeaseHeld when another process holds the lease (before launching, or when the child itself was
    refused: exit code 75), RuntimeError when the child died or did not take the lease in time.
    """
    job = registry.job(job_id)
    trigger = str(job.triggers["live"])
    if lease.is_held(settings, job_id):
        raise lease.LeaseHeld(lease.describe_holder(job_id, lease.read_lease(settings, job_id)))
    if read_state(settings, job_id).get("stopped_by_request"):
        log.info("job=%s: started explicitly, clearing its stopped-by-request flag", job_id)
        update_state(settings, job_id, stopped_by_request=None)
    for child in LAUNCHED.values():
        child.poll()  # reap finished children
    command = spark_submit_command(settings, job_id, trigger)
    path = settings.layout.job_log(job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        offset = out.tell()
        out.write(f"--- {datetime.now(UTC).isoformat(timespec='seconds')} supervisor: {' '.join(command)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env={**os.environ, **job_environment(settings)}, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    LAUNCHED[process.pid] = process
    log.info("job=%s: launched process group %s (%s), log %s", job_id, process.pid, trigger, path)

    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        owner = lease.read_lease(settings, job_id)
        code = process.poll()
        driver = owner.get("pid") if owner and owner.get("host") == socket.gethostname() else None
        if code is None and driver and session_of(driver) == process.pid:
            log.info("job=%s: running, driver pid %s holds its checkpoint lease", job_id, driver)
            return driver
        if code == ExitCode.REFUSED:
            holder = lease.describe_holder(job_id, lease.read_lease(settings, job_id))
            raise lease.LeaseHeld(f"{holder} (the new process exited {code}: refused)")
        if code is not None:
            tail = "\n".join(_read_from(path, offset).splitlines()[-40:])
            raise RuntimeError(f"job {job_id!r}: process {process.pid} exited with code {code} while starting; "
                               f"end of {path}:\n{tail}")
        if time.monotonic() >= deadline:
            signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            raise RuntimeError(f"job {job_id!r}: process {process.pid} did not take its checkpoint lease within "
                               f"{START_TIMEOUT_SECONDS:.0f}s and was killed; see {path}")
        time.sleep(POLL_SECONDS)


def stop_job(settings: Settings, job_id: str, reason: str, wait_seconds: float = 0.0) -> bool:
    """Ask the running job to stop at its next batch boundary; it stays stopped until started.

    Returns True when the job is not running (anymore); with `wait_seconds` > 0, waits that long
    for its lease to be released.
    """
    update_state(settings, job_id, stopped_by_request={"reason": reason, "requested_at": time.time()})
    if not lease.is_held(settings, job_id):
        log.info("job=%s is not running; marked stopped (%s)", job_id, reason)
        return True
    stop_requests.request_stop(settings, job_id, reason)
    log.info("job=%s: stop requested (%s)", job_id, reason)
    deadline = time.monotonic() + max(wait_seconds, 0.0)
    while lease.is_held(settings, job_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    stop_requests.clear(settings, job_id)  # normally removed by the job; not when it ended on its own meanwhile
    log.info("job=%s stopped", job_id)
    return True


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def session_of(pid: int) -> int | None:
    """The session id of `pid` (a live job's is the pid of the process the supervisor launched)."""
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def signal_group(pid: int, signum: int) -> None:
    """Signal `pid`'s process group when it runs in a session of its own (a launched job: driver and
    JVM), else just `pid` (a job started by hand must not take its terminal's other processes along)."""
    try:
        group = os.getpgid(pid)
        if group == os.getsid(pid) and group != os.getpgrp():
            os.killpg(group, signum)
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


def end_stalled(settings: Settings, job_id: str, pid: int | None) -> bool:
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
        signal_group(pid, signal.SIGKILL)
    released = _wait_released(settings, job_id, 30.0)
    for child in LAUNCHED.values():
        child.poll()
    return released


