"""A group of live jobs in one driver, as the group tests run it: the registry variant, who holds each job's lease,
the drivers a test's supervisor launched (reaped at the end, their logs shown on a failure) and their Python stacks."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from datetime import timedelta

import yaml

from include.generator import DEFAULT_START
from include.ops import processes
from include.records import lease
from include.registry import build_registry
from include.settings import load_settings

GROUP = "clickstream"
MEMBERS = ["bronze_clickstream", "silver_clickstream", "gold_user_activity_5m"]


def group_registry(path, members=MEMBERS, following=()):
    """The real registry, with bronze, silver and the 5-minute windows of clickstream (or `members`) in one group
    (2 s triggers, or on their upstream's commits for the jobs in `following`; restarts without backoff)."""
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    for job_id in members:
        live = "on-upstream-commit" if job_id in following else "processing-time=2 seconds"
        raw["jobs"][job_id].update(group=GROUP, triggers={"live": live}, supervision={"backoff_seconds": 0})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return build_registry(raw, path)


def holders(settings, members=MEMBERS) -> dict[str, int | None]:
    return {j: getattr(lease.holder(settings, j), "pid", None) for j in members}


@contextmanager
def drivers_launched_here(settings=None):
    """Kill and reap, at the end, the drivers the test's supervisor calls launched; when the test fails, print the
    end of their logs under `settings` (pytest shows it with the failure)."""
    before = set(processes.LAUNCHED)
    try:
        yield
    except BaseException:
        if settings is not None:
            print_driver_logs(settings)
        raise
    finally:
        for pid, process in list(processes.LAUNCHED.items()):
            if pid not in before:
                if process.poll() is None:
                    processes.signal_group(pid, signal.SIGKILL)
                process.wait(timeout=60)
                del processes.LAUNCHED[pid]


def print_driver_logs(settings, lines: int = 150) -> None:
    """The last `lines` lines of each driver log (Java stack frames left out)."""
    for path in sorted(settings.layout.job_log("any").parent.glob("*.log")):
        text = [line for line in path.read_text(errors="replace").splitlines() if not line.startswith("\tat ")]
        print(f"--- the end of {path} ---", *text[-lines:], sep="\n")


def driver_stacks(settings, pid: int, timeout: float = 10.0) -> list[str]:
    """Where each Python thread of the driver `pid` is (SIGUSR1: it writes their stacks to its log), a line per thread
    that runs this project's code: its innermost frame, then the project's frames (innermost first)."""
    path = settings.layout.job_log("any").parent
    logs = sorted(path.glob("*.log"))
    before = {p: p.stat().st_size for p in logs}
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log_path in logs:
            with log_path.open(errors="replace") as log_file:
                log_file.seek(before[log_path])
                dump = log_file.read()
            if "(most recent call first)" in dump:
                time.sleep(0.5)  # the dump is written at once; let it end
                with log_path.open(errors="replace") as log_file:
                    log_file.seek(before[log_path])
                    return _threads_of(log_file.read())
        time.sleep(0.2)
    return [f"driver {pid} wrote no stacks within {timeout:.0f}s"]


def _threads_of(dump: str) -> list[str]:
    threads, frames = [], []  # frames: (whether the project's, "file:line function")
    for line in [*dump.splitlines(), ""]:
        if "(most recent call first)" in line or not line.strip():
            ours = [frame for own, frame in frames if own]
            if ours:
                threads.append(" < ".join(dict.fromkeys([frames[0][1], *ours[:4]])))
            frames = []
        elif line.strip().startswith("File "):
            file, _, rest = line.strip()[6:].partition('", line ')
            own = "/spark_jobs/" in file or "/include/" in file
            frames.append((own, f"{file.rsplit('/', 1)[-1]}:{rest.replace(' in ', ' ')}"))
    return threads


def drop_after(drops):
    """The start of the next drop's events: two hours after the previous drop's, so that its windows are new."""
    return DEFAULT_START + timedelta(hours=2 * len(drops))
