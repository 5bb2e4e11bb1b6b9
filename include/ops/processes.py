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
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from include.failures import ExitCode
from include.ops import admission
from include.ops.launch import (
    group_submit_kwargs,
    job_environment,
    job_submit_kwargs,
    submit_command,
)
from include.records import groups, job_requests, lease, log_rotation, run_outcomes
from include.records.bookkeeping import read_state, update_state
from include.registry import Registry, ResourcesSpec
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

    A job of a group runs in its group's driver: when that runs, it is asked to start the job (a start request);
    otherwise the group's driver is launched, with every job of the group not stopped by request.
    `settings.registry_path` must be the file `registry` was loaded from: the child reads it.
    A new driver must fit this host's live driver slots (include/ops/admission.py) and starts when no other is
    starting. Returns the pid of the job's driver (the lease owner). Clears a stopped-by-request flag. Raises
    LeaseHeld when another process holds the lease (before launching, or when the child itself was
    refused: exit code 75), CapacityFull when no slot is free, RuntimeError when the child died or did not take
    the lease in time.
    """
    job = registry.job(job_id)
    lease.refuse_if_held(settings, job_id)
    if read_state(settings, job_id).get("stopped_by_request"):
        log.info("job=%s: started explicitly, clearing its stopped-by-request flag", job_id)
        update_state(settings, job_id, stopped_by_request=None)
    for child in LAUNCHED.values():
        child.poll()  # reap finished children
    if job.group and groups.running(settings, job.group):
        return _start_in_group(settings, job_id, job.group, registry.resources(job.group))
    unit = job.group or job_id
    admission.admit(settings, registry, unit)  # CapacityFull: every live driver slot of this host is in use
    with admission.one_start_at_a_time(settings):
        if job.group:
            return _start_in_group(settings, job_id, job.group, registry.resources(job.group))
        process, path, offset = _launch(settings, job_id, submit_command(job_submit_kwargs(
            settings, job_id, job.triggers["live"], registry.resources(job_id))))
        return _await_lease(settings, job_id, lambda: process, path, offset)


def _launch(settings: Settings, name: str, command: list[str]) -> tuple[subprocess.Popen, Path, int]:
    """Start `command` detached, in a session of its own, its output appended to the log of `name` (a job or a
    group)."""
    path = settings.layout.job_log(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    log_rotation.rotate(path, settings.log_max_bytes, settings.log_backups)
    with path.open("ab") as out:
        offset = out.tell()
        out.write(f"--- {datetime.now(UTC).isoformat(timespec='seconds')} supervisor: {' '.join(command)}\n".encode())
        out.flush()
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env={**os.environ, **job_environment(settings),
                                         log_rotation.LOG_FILE_VARIABLE: str(path)}, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    LAUNCHED[process.pid] = process
    log.info("%s: launched process group %s, log %s", name, process.pid, path)
    return process, path, offset


def _start_in_group(settings: Settings, job_id: str, group: str, resources: ResourcesSpec) -> int:
    """Ask the group's running driver to start the job, or launch the group's driver; the driver's pid once the
    job holds its lease there."""
    asked_at = datetime.now(UTC).isoformat()
    launched: list = []  # the group's driver, when launched here

    def launch_if_down() -> subprocess.Popen | None:
        if not launched and not groups.running(settings, group):
            job_requests.clear(settings, job_id, "start")  # the new driver starts it anyway
            launched.append(_launch(settings, group, submit_command(group_submit_kwargs(settings, group, resources))))
        return launched[0][0] if launched else None

    if groups.running(settings, group):
        job_requests.request(settings, job_id, f"started by the supervisor at {asked_at}", "start")
        log.info("job=%s: asked the driver of group %s (pid %s) to start it", job_id, group,
                 groups.driver_pid(settings, group))
    launch_if_down()
    path = settings.layout.job_log(group)

    def refused() -> str | None:
        outcome = run_outcomes.read(groups.outcomes(settings, group), job_id)
        return outcome.detail if outcome and outcome.at > asked_at and not outcome.ran else None

    offset = launched[0][2] if launched else path.stat().st_size if path.exists() else 0
    return _await_lease(settings, job_id, launch_if_down, path, offset, refused)


def _await_lease(settings: Settings, job_id: str, process_of, path: Path, offset: int,
                 refused=lambda: None) -> int:
    """Wait until the job's lease is held by the driver `process_of()` launched (or by its group's running
    driver), and return that driver's pid; raise when the process exits or the driver refuses the job first."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while True:
        process = process_of()
        owner = lease.holder(settings, job_id)
        code = process.poll() if process else None
        driver = owner.pid if owner is not None and owner.on(settings.host_name) else None
        if driver and (process is None or (code is None and session_of(driver) == process.pid)):
            log.info("job=%s: running, driver pid %s holds its checkpoint lease", job_id, driver)
            return driver
        if code == ExitCode.REFUSED:
            holder = lease.read_lease(settings, job_id) or lease.Owner(job_id)
            raise lease.LeaseHeld(f"{holder.describe()} (the new process exited {code}: refused)")
        if code is not None:
            tail = "\n".join(_read_from(path, offset).splitlines()[-40:])
            raise RuntimeError(f"job {job_id!r}: process {process.pid} exited with code {code} while starting; "
                               f"end of {path}:\n{tail}")
        why = refused()
        if why:
            raise RuntimeError(f"job {job_id!r}: not started by its group's driver: {why}")
        if time.monotonic() >= deadline:
            if process is not None:
                signal_group(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
            raise RuntimeError(f"job {job_id!r}: did not take its checkpoint lease within "
                               f"{START_TIMEOUT_SECONDS:.0f}s" + (" and its process was killed" if process else "")
                               + f"; see {path}")
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
    job_requests.request_stop(settings, job_id, reason)
    log.info("job=%s: stop requested (%s)", job_id, reason)
    deadline = time.monotonic() + max(wait_seconds, 0.0)
    while lease.is_held(settings, job_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    job_requests.clear(settings, job_id)  # normally removed by the job; not when it ended on its own meanwhile
    log.info("job=%s stopped", job_id)
    return True


def stop_jobs(settings: Settings, job_ids: list[str], reason: str, wait_seconds: float = 0.0) -> list[str]:
    """Ask every one of the jobs to stop at its next batch boundary (all at once), then wait up to `wait_seconds`
    for them together; the jobs still running."""
    for job_id in job_ids:
        stop_job(settings, job_id, reason)
    running = _still_held(settings, job_ids, max(wait_seconds, 0.0))
    for job_id in set(job_ids) - set(running):
        job_requests.clear(settings, job_id)
    return running


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
    return not _still_held(settings, [job_id], seconds)


def _still_held(settings: Settings, job_ids: list[str], seconds: float) -> list[str]:
    """Wait up to `seconds` for the jobs' leases to be released; the jobs still holding theirs."""
    deadline = time.monotonic() + seconds
    while True:
        held = [j for j in job_ids if lease.is_held(settings, j)]
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(POLL_SECONDS)


def end_stalled(settings: Settings, job_id: str, pid: int | None, group: str | None = None) -> bool:
    """End the stalled job; True once its lease is free. Alone: SIGTERM its driver, SIGKILL its process group after
    a grace. In its group's driver: ask that query to stop first (its siblings go on); only when it does not, end
    the driver as a whole (its siblings are started again with it).

    Safe because every batch commit is exactly-once: a killed batch replays on restart.
    """
    owner = lease.read_lease(settings, job_id)
    if pid is None or owner is None or owner.pid != pid or not owner.on(settings.host_name):
        return False  # held from another host (or changed hands meanwhile): not ours to kill
    if group and groups.driver_pid(settings, group) == pid:
        log.warning("job=%s: asking the driver of group %s (pid %s) to stop its stalled query", job_id, group, pid)
        job_requests.request_stop(settings, job_id, "stalled: ended by the supervisor")
        if _wait_released(settings, job_id, settings.stop_grace_seconds + TERM_GRACE_SECONDS):
            return True
        log.warning("job=%s: its query did not stop; ending the driver of group %s", job_id, group)
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
