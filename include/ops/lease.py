"""At most one writer per checkpoint: a lease with expiry, held by the process running the job.

The lease is `_checkpoints/<job>.lease` (beside the checkpoint, so a checkpoint reset keeps it).
The owner record also says how the holder runs the job (`trigger`), so a backfill can tell a live
job from another catch-up run.
On one host an OS lock (flock) guards it, released by the kernel even on SIGKILL; the JSON body
(owner pid, host, expiry renewed while the job runs) guards writers on other hosts that share the
storage, and tells a refused starter who holds it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from include.settings import Settings
from include.storage.files import read_json

log = logging.getLogger(__name__)
DEFAULT_TTL_SECONDS = 60.0


class LeaseHeld(RuntimeError):
    """Another process holds the job's checkpoint lease."""


def read_lease(settings: Settings, job_id: str, path: Path | None = None) -> dict | None:
    return read_json(path or settings.layout.lease(job_id))


def describe_holder(job_id: str, owner: dict | None) -> str:
    if not owner:
        return f"job {job_id!r} is already running (another process holds its checkpoint lease)"
    expires = datetime.fromtimestamp(owner["expires_at"], UTC).isoformat(timespec="seconds")
    if owner.get("action"):
        return (f"job {job_id!r} is under a checkpoint action ({owner['action']}): pid {owner['pid']} on "
                f"{owner['host']} holds its checkpoint lease since {owner['acquired_at']}; refusing to start it "
                "until the action ends")
    mode = f" ({owner['trigger']})" if owner.get("trigger") else ""
    return (
        f"job {job_id!r} is already running{mode}: pid {owner['pid']} on {owner['host']} holds its checkpoint "
        f"lease since {owner['acquired_at']} (expires {expires} unless renewed); refusing a second writer"
    )


@dataclass
class Lease:
    job_id: str
    path: Path
    fd: int
    ttl_seconds: float
    acquired_at: str
    trigger: str = ""
    renewed_at: float = 0.0
    action: str = ""  # set while a checkpoint action holds the lease: which one
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # renewals from two threads

    def renew(self, force: bool = False) -> None:
        """Push the expiry forward; cheap to call often (writes at most every ttl/3 seconds)."""
        with self._lock:
            self._renew(force)

    def _renew(self, force: bool) -> None:
        now = time.time()
        if not force and now - self.renewed_at < self.ttl_seconds / 3:
            return
        body = {
            "job": self.job_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "acquired_at": self.acquired_at,
            "expires_at": now + self.ttl_seconds,
            "trigger": self.trigger,
            **({"action": self.action} if self.action else {}),
        }
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(body).encode(), 0)
        self.renewed_at = now

    def release(self) -> None:
        try:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
        log.info("job=%s released its checkpoint lease", self.job_id)


def acquire(settings: Settings, job_id: str, trigger: str = "", ttl_seconds: float = DEFAULT_TTL_SECONDS,
            action: str = "", path: Path | None = None) -> Lease:
    """Take the job's lease (recording how it runs) or raise :class:`LeaseHeld` naming the current holder. `path`:
    another lease than a job's (a group's driver: include/ops/groups.py)."""
    path = path or settings.layout.lease(job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for attempt in range(10):  # a probe by is_held() holds a shared lock for microseconds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt == 9:
                os.close(fd)
                raise LeaseHeld(describe_holder(job_id, read_lease(settings, job_id, path))) from None
            time.sleep(0.05)
    owner = read_lease(settings, job_id, path)
    if owner and owner.get("host") != socket.gethostname() and owner.get("expires_at", 0) > time.time():
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise LeaseHeld(describe_holder(job_id, owner))
    lease = Lease(job_id, path, fd, ttl_seconds, datetime.now(UTC).isoformat(timespec="seconds"), trigger,
                  action=action)
    lease.renew(force=True)
    log.info("job=%s acquired its checkpoint lease", job_id)
    return lease


def wait_while_catching_up(settings: Settings, job_ids: list[str], timeout: float) -> list[str]:
    """Wait, up to `timeout` seconds, while another available-now run holds the lease of one of `job_ids` (a
    backfill task's previous try still stopping at its batch boundary, or a run by hand): it ends by itself. Live
    holders and checkpoint actions are not waited for. Returns the jobs still held by such a run."""
    import time

    def catching_up() -> list[str]:
        return [j for j in job_ids if is_held(settings, j)
                and (read_lease(settings, j) or {}).get("trigger") == "available-now"]

    deadline = time.monotonic() + timeout
    waiting = catching_up()
    if waiting:
        log.info("waiting up to %.0f s for the available-now runs of %s to end", timeout, ", ".join(waiting))
    while waiting and time.monotonic() < deadline:
        time.sleep(1.0)
        waiting = catching_up()
    return waiting


def is_held(settings: Settings, job_id: str, path: Path | None = None) -> bool:
    """True while a process holds the lease: probes the lock (same host) or the expiry (other hosts)."""
    path = path or settings.layout.lease(job_id)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    owner = read_lease(settings, job_id, path)
    return bool(owner and owner.get("host") != socket.gethostname() and owner.get("expires_at", 0) > time.time())


@contextmanager
def hold(settings: Settings, job_ids: list[str], action: str) -> Iterator[dict[str, Lease]]:
    """Take the leases of `job_ids` for a checkpoint action (all or none: LeaseHeld names the first holder), renew
    them in the background while it runs, release them when it ends."""
    held: dict[str, Lease] = {}
    try:
        for job_id in job_ids:
            held[job_id] = acquire(settings, job_id, trigger="checkpoint action", action=action)
    except LeaseHeld as holder:
        for taken in held.values():
            taken.release()
        raise LeaseHeld(f"{holder}; stop it first (lakehouse stop {job_id} --wait 120)") from None
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(DEFAULT_TTL_SECONDS / 3):
            for taken in held.values():
                taken.renew()

    renewer = threading.Thread(target=renew, name="lease-renewal", daemon=True)
    renewer.start()
    try:
        yield held
    finally:
        stop.set()
        renewer.join()
        for taken in held.values():
            taken.release()
