"""At most one writer per checkpoint: a lease with expiry, held by the process running the job.

The lease is `_checkpoints/<job>.lease` (beside the checkpoint, so a checkpoint reset keeps it); a group's driver
holds `_ops/groups/<group>.lease`. Its owner record (pid, host, since when, until when, and how the holder runs the
job: `trigger`, or the checkpoint `action`) tells a refused starter who holds it: :class:`Owner` (its questions:
alive? mine? expired? under an action?), read by :func:`read_lease` (the last record) and :func:`holder` (who holds
it now).

Two implementations behind one interface, chosen by where the lakehouse lives:

- A local root: an OS lock (flock) on the file, released by the kernel even on SIGKILL, plus the owner record.
- An object store (S3): the lease object itself, written with conditional puts. Taken by creating it only if absent
  (or, when its holder released it, let it expire or died on this host, by replacing exactly the version read);
  renewed every `ttl / 3` by replacing exactly the version this holder wrote last; released by deleting that
  version. Nobody takes it over while its holder renews it: another host waits until `expires_at` (the holder's
  last renewal + `ttl`, LAKEHOUSE_LEASE_SECONDS); on the holder's own host a holder whose process is gone is
  replaced at once. A holder that cannot renew for `ttl / 2` (the store unreachable, the process paused) counts
  its lease as lost before anyone may take it (:meth:`Lease.check` raises :class:`LeaseLost`): the jobs stop their
  queries and commit nothing more. Hosts' clocks must agree to within `ttl / 2`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from include.settings import Settings
from include.storage.files import read_json
from include.storage.paths import StoragePath, VersionMismatch

log = logging.getLogger(__name__)
DEFAULT_TTL_SECONDS = 60.0


class LeaseHeld(RuntimeError):
    """Another process holds the job's checkpoint lease."""


class LeaseLost(RuntimeError):
    """This process no longer holds its lease (another took it over, or it could not renew in time)."""


@dataclass(frozen=True)
class Owner:
    """A lease's owner record, as written by its holder (:meth:`Lease.body`), with the questions asked of it."""

    job: str
    pid: int | None = None
    host: str = ""
    acquired_at: str = ""
    expires_at: float = 0.0
    trigger: str = ""  # how the holder runs the job (a trigger), or "checkpoint action"
    action: str = ""  # set while a checkpoint action holds the lease: which one
    token: str = ""
    pid_start: str | None = None
    released: bool = False

    @classmethod
    def from_record(cls, job_id: str, record: dict | None) -> Owner | None:
        if not record:
            return None
        return cls(job=record.get("job") or job_id, pid=record.get("pid"), host=record.get("host") or "",
                   acquired_at=record.get("acquired_at") or "", expires_at=float(record.get("expires_at") or 0),
                   trigger=record.get("trigger") or "", action=record.get("action") or "",
                   token=record.get("token") or "", pid_start=record.get("pid_start"),
                   released=bool(record.get("released")))

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at < (time.time() if now is None else now)

    def gone(self, host: str) -> bool:
        """Whether the record names a process of `host` (this host) that no longer runs (its pid gone or reused)."""
        if self.host != host or not self.pid:
            return False
        started = _process_start(int(self.pid))
        return started is None or self.pid_start not in (None, started)

    def alive(self, host: str) -> bool:
        """Whether the record holds the lease as seen from `host`: not released, not expired, its process not gone
        from `host` (an object lease's whole truth; a local lease's holder also holds its flock)."""
        return not (self.released or self.expired() or self.gone(host))

    def on(self, host: str) -> bool:
        return bool(self.host) and self.host == host

    def mine(self, host: str) -> bool:
        """Whether this process (on `host`) holds it."""
        return self.on(host) and self.pid == os.getpid()

    @property
    def catching_up(self) -> bool:
        """An available-now run: it ends by itself."""
        return self.trigger == "available-now"

    def describe(self) -> str:
        """Who holds the job and since when, for a refused starter."""
        if self.pid is None:
            return f"job {self.job!r} is already running (another process holds its checkpoint lease)"
        expires = datetime.fromtimestamp(self.expires_at, UTC).isoformat(timespec="seconds")
        if self.action:
            return (f"job {self.job!r} is under a checkpoint action ({self.action}): pid {self.pid} on {self.host} "
                    f"holds its checkpoint lease since {self.acquired_at}; refusing to start it until the action ends")
        mode = f" ({self.trigger})" if self.trigger else ""
        return (f"job {self.job!r} is already running{mode}: pid {self.pid} on {self.host} holds its checkpoint "
                f"lease since {self.acquired_at} (expires {expires} unless renewed); refusing a second writer")


def read_lease(settings: Settings, job_id: str, path: StoragePath | None = None) -> Owner | None:
    """The lease's last owner record (held or not), or None when there is none."""
    return read_lease_at(job_id, path or settings.layout.lease(job_id))


def read_lease_at(job_id: str, path: StoragePath) -> Owner | None:
    return Owner.from_record(job_id, read_json(path))


def holder(settings: Settings, job_id: str, path: StoragePath | None = None) -> Owner | None:
    """Who holds the lease now, or None while nobody does (a holder whose record is not written yet: an Owner
    without a pid)."""
    if not is_held(settings, job_id, path):
        return None
    return read_lease(settings, job_id, path) or Owner(job_id)


def refuse_if_held(settings: Settings, job_id: str) -> None:
    """Raise :class:`LeaseHeld`, naming the holder, while another process holds the job's lease."""
    owner = holder(settings, job_id)
    if owner is not None:
        raise LeaseHeld(owner.describe())


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, /proc), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@dataclass
class Lease:
    job_id: str
    path: StoragePath
    ttl_seconds: float
    acquired_at: str
    host: str
    trigger: str = ""
    action: str = ""  # set while a checkpoint action holds the lease: which one
    fd: int | None = None  # a local root's flock'ed file
    version: str = ""  # an object lease's version this holder wrote last
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    renewed_at: float = 0.0  # wall clock of the last renewal
    valid_until: float = 0.0  # monotonic: past this, without a renewal, the lease counts as lost (object leases)
    lost: str = ""  # why the lease was lost, once it was
    sequence: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # renewals from two threads

    def body(self, now: float) -> dict:
        return {"job": self.job_id, "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
                "host": self.host, "acquired_at": self.acquired_at, "expires_at": now + self.ttl_seconds,
                "ttl_seconds": self.ttl_seconds, "trigger": self.trigger, "token": self.token,
                "sequence": self.sequence, **({"action": self.action} if self.action else {})}

    def renew(self, force: bool = False) -> None:
        """Push the expiry forward; cheap to call often (writes at most every ttl/3 seconds). An object lease found
        taken over is marked lost (see :meth:`check`); a renewal the store did not answer is tried again next time."""
        with self._lock:
            now = time.time()
            if self.lost or (not force and now - self.renewed_at < self.ttl_seconds / 3):
                return
            if self.fd is not None:
                os.ftruncate(self.fd, 0)
                os.pwrite(self.fd, json.dumps(self.body(now)).encode(), 0)
                self.renewed_at = now
                return
            started = time.monotonic()
            self.sequence += 1
            body = json.dumps(self.body(now)).encode()
            try:
                self.version = self.path.replace_if(body, self.version)
            except VersionMismatch:
                if not self._written_by_me(body):
                    owner = read_lease_at(self.job_id, self.path)
                    self.lost = (f"its lease {self.path} was taken over by pid {owner.pid} on {owner.host}"
                                 if owner else
                                 f"its lease {self.path} expired while it could not renew it, and was taken over "
                                 "and released since")
                    log.error("job=%s lost its lease: %s", self.job_id, self.lost)
                    return
            except Exception as exc:  # the store unreachable: try again; check() fences once it is too late
                self.sequence -= 1
                log.warning("job=%s could not renew its lease (%s); trying again", self.job_id, exc)
                return
            self.renewed_at = now
            self.valid_until = started + self.ttl_seconds / 2

    def _written_by_me(self, body: bytes) -> bool:
        """After a rejected replace: whether the object holds `body` anyway (an answer lost, the put retried)."""
        try:
            data, version = self.path.read_versioned()
        except FileNotFoundError:
            return False
        if data != body:
            return False
        self.version = version
        return True

    def check(self) -> None:
        """Raise LeaseLost unless this process may still commit as the lease's holder: it was not taken over, and
        (object leases) it was renewed within the last ttl/2 seconds, long before another host may take it."""
        if not self.lost and self.fd is None and time.monotonic() > self.valid_until:
            self.renew(force=True)
            if time.monotonic() > self.valid_until and not self.lost:
                self.lost = f"its lease {self.path} was not renewed for over {self.ttl_seconds / 2:.0f} s"
        if self.lost:
            raise LeaseLost(f"job {self.job_id!r} stopped: {self.lost}; it commits nothing more")

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
        elif not self.lost:
            try:
                self.path.delete_if(self.version)
            except VersionMismatch:
                log.warning("job=%s: its lease was taken over before it released it", self.job_id)
                return
        log.info("job=%s released its checkpoint lease", self.job_id)


def acquire(settings: Settings, job_id: str, trigger: str = "", ttl_seconds: float | None = None,
            action: str = "", path: StoragePath | None = None) -> Lease:
    """Take the job's lease (recording how it runs) or raise :class:`LeaseHeld` naming the current holder. `path`:
    another lease than a job's (a group's driver: include/records/groups.py)."""
    path = path or settings.layout.lease(job_id)
    lease = Lease(job_id, path, ttl_seconds or settings.lease_seconds,
                  datetime.now(UTC).isoformat(timespec="seconds"), settings.host_name, trigger, action)
    if path.is_local:
        _acquire_flock(lease)
    else:
        _acquire_object(lease)
    log.info("job=%s acquired its checkpoint lease", job_id)
    return lease


def _acquire_flock(lease: Lease) -> None:
    path = lease.path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for attempt in range(10):  # a probe by is_held() holds a shared lock for microseconds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt == 9:
                os.close(fd)
                raise LeaseHeld((read_lease_at(lease.job_id, path) or Owner(lease.job_id)).describe()) from None
            time.sleep(0.05)
    owner = read_lease_at(lease.job_id, path)
    if owner and not owner.on(lease.host) and not owner.expired():
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise LeaseHeld(owner.describe())
    lease.fd = fd
    lease.renew(force=True)


def _acquire_object(lease: Lease) -> None:
    started = time.monotonic()
    now = time.time()
    body = json.dumps(lease.body(now)).encode()
    for _ in range(5):  # the object may change between our read and our write: look again
        try:
            lease.version = lease.path.create_exclusive(body)
            break
        except FileExistsError:
            pass
        try:
            data, version = lease.path.read_versioned()
        except FileNotFoundError:
            continue  # released meanwhile
        try:
            owner = Owner.from_record(lease.job_id, json.loads(data))
        except json.JSONDecodeError:
            owner = None
        if owner is not None and owner.alive(lease.host):
            raise LeaseHeld(owner.describe())
        try:
            lease.version = lease.path.replace_if(body, version)
            if owner and not owner.released:
                log.warning("job=%s: took over the lease of pid %s on %s (%s)", lease.job_id, owner.pid, owner.host,
                            "its process is gone" if owner.gone(lease.host) else "expired")
            break
        except VersionMismatch:
            continue
    else:
        raise LeaseHeld((read_lease_at(lease.job_id, lease.path) or Owner(lease.job_id)).describe())
    lease.renewed_at = now
    lease.valid_until = started + lease.ttl_seconds / 2


def wait_while_catching_up(settings: Settings, job_ids: list[str], timeout: float) -> list[str]:
    """Wait, up to `timeout` seconds, while another available-now run holds the lease of one of `job_ids` (a
    backfill task's previous try still stopping at its batch boundary, or a run by hand): it ends by itself. Live
    holders and checkpoint actions are not waited for. Returns the jobs still held by such a run."""

    def catching_up() -> list[str]:
        holders = {j: holder(settings, j) for j in job_ids}
        return [j for j, owner in holders.items() if owner is not None and owner.catching_up]

    deadline = time.monotonic() + timeout
    waiting = catching_up()
    if waiting:
        log.info("waiting up to %.0f s for the available-now runs of %s to end", timeout, ", ".join(waiting))
    while waiting and time.monotonic() < deadline:
        time.sleep(1.0)
        waiting = catching_up()
    return waiting


def is_held(settings: Settings, job_id: str, path: StoragePath | None = None) -> bool:
    """True while a process holds the lease: probes the lock (a local root: same host) or the owner record (other
    hosts; an object lease: not released, not expired, its holder not gone from this host)."""
    path = path or settings.layout.lease(job_id)
    if not path.is_local:
        owner = read_lease_at(job_id, path)
        return owner is not None and owner.alive(settings.host_name)
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
    owner = read_lease_at(job_id, path)  # a holder on another host (a shared disk) has no flock of this host
    return owner is not None and not owner.on(settings.host_name) and not owner.expired()


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
    with renewing(list(held.values())):
        try:
            yield held
        finally:
            for taken in held.values():
                taken.release()


@contextmanager
def renewing(leases: list[Lease]) -> Iterator[None]:
    """Renew `leases` from a background thread while the block runs (a holder whose own loop may block long)."""
    stop = threading.Event()
    interval = min(lease.ttl_seconds for lease in leases) / 6 if leases else 10.0

    def renew() -> None:
        while not stop.wait(interval):
            for taken in leases:
                taken.renew()

    renewer = threading.Thread(target=renew, name="lease-renewal", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
