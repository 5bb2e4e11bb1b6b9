"""Test helpers: landing files in arrival order, gold rows as oracle-shaped dicts, running the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from include.entrypoints import lakehouse_command
from include.generator import GeneratorConfig, write_landing
from include.settings import Settings
from include.storage import delta as delta_store

LAKEHOUSE = lakehouse_command()  # as a person runs it: the entry point `make bootstrap` installs
REPO = Path(__file__).resolve().parents[2]


def generate(settings: Settings, **kwargs):
    config = GeneratorConfig(**{"events": 3000, "seed": 11, "files": 6, **kwargs})
    return write_landing(settings.layout.landing("landing/clickstream"), "clickstream", config)


def land_logins(settings: Settings, **kwargs):
    """Login events (the fraud-alert lineage's landing source), a few alerts' worth by default."""
    config = GeneratorConfig(**{"events": 1600, "seed": 5, "files": 4, "users": 12, "events_per_minute": 8.0,
                                "late_fraction": 0.03, "duplicate_fraction": 0.05, **kwargs})
    return write_landing(settings.layout.landing("landing/logins"), "logins", config)


def fraud_alert_rows(settings: Settings, only_fraud_alerts: bool = False) -> list[tuple]:
    """The sorted FRAUD_ALERT rows of gold/alerts, as the oracle's expected_alerts gives them; with
    `only_fraud_alerts`, the table must hold no other kind (only the fraud job wrote it)."""
    rows = delta_store.read_table(settings.layout.table("gold/alerts")).to_pylist()
    if only_fraud_alerts:
        assert all(r["alert_type"] == "FRAUD_ALERT" for r in rows), {r["alert_type"] for r in rows}
    return sorted((r["entity"], int(r["alert_time"].timestamp()), int(r["window_start"].timestamp()), r["event_count"])
                  for r in rows if r["alert_type"] == "FRAUD_ALERT")


def landed(settings: Settings) -> int:
    """Lines of the clickstream that bronze holds: its rows and its quarantined lines (0 before either exists)."""
    layout = settings.layout
    tables = [layout.table("bronze/clickstream"), layout.table("bronze/clickstream_quarantine")]
    return sum(delta_store.count_rows(t) for t in tables if delta_store.table_exists(t))


def arrival_order(files: list[Path]) -> list[Path]:
    return sorted(files, key=lambda p: p.stat().st_mtime)


def gold_rows(settings: Settings, table: str, key: str = "user_id") -> dict[tuple, tuple]:
    """{(start, end, key): (event_count, total_value)} of a windowed or session gold table."""
    rows = delta_store.read_table(settings.layout.table(table)).to_pylist()
    result = {}
    for r in rows:
        start, end = (r["session_start"], r["session_end"]) if "session_start" in r else (r["window_start"], r["window_end"])
        k = (int(start.timestamp()), int(end.timestamp()), r[key])
        assert k not in result, f"duplicate window row {k} in {table}"
        result[k] = (r["event_count"], r["total_value"])
    return result


def session_summary_rows(settings: Settings) -> list[tuple]:
    """The sorted rows of gold/user_session_summaries, as the oracle's expected_session_summaries gives them."""
    rows = delta_store.read_table(settings.layout.table("gold/user_session_summaries")).to_pylist()
    return sorted((r["user_id"], *(int(r[c].timestamp()) for c in ("session_start", "session_end")), r["event_count"],
                   r["total_value"], int(r["closed_at"].timestamp())) for r in rows)


def lineage(registry, landing_source: str = "clickstream") -> list[str]:
    """The jobs, in order, whose inputs all derive from one landing source (what the oracle models)."""
    jobs: list[str] = []
    for job_id in registry.order:
        sources = registry.job(job_id).sources
        if all(s.name == landing_source if s.kind in ("landing", "kafka") else registry.writer_of(s.name).id in jobs
               for s in sources):
            jobs.append(job_id)
    return jobs


def read_to(settings: Settings, job_id: str, batch: int | None = None) -> int:
    """The last version of its Delta source the job's checkpoint has read whole by committed batch `batch` (the
    latest when None; -1 before any)."""
    from include import checkpoints
    from include.checkpoints.modes import next_unread

    checkpoint = settings.layout.checkpoint(job_id)
    batch = checkpoints.latest_committed_batch(checkpoint) if batch is None else batch
    if batch is None or batch < 0:
        return -1
    return next_unread(json.loads(checkpoints.source_offsets(checkpoint, batch)[0])) - 1


def wait_until_read(settings: Settings, job_id: str, version: int, runner, deadline: float) -> None:
    """Wait until the live run in thread `runner` has read `version` of its Delta source and committed one batch
    more (it stays alive meanwhile). The batch after is the no-data batch that moves the watermark over what was
    read, as the end of an available-now run does: a stop before it would leave the watermark a batch behind, and
    the next run's late-row filter where the oracle does not model it. The rows read must move the watermark."""
    from include import checkpoints

    checkpoint = settings.layout.checkpoint(job_id)
    while (latest := checkpoints.latest_committed_batch(checkpoint)) is None or read_to(settings, job_id,
                                                                                         latest - 1) < version:
        assert runner.is_alive() and time.monotonic() < deadline, f"{job_id} did not read version {version}"
        time.sleep(0.2)


def wait_for(condition, timeout: float, what, interval: float | None = None):
    """Poll `condition` until it returns something truthy (returned), or fail after `timeout` seconds naming `what`
    (a string, or a function giving one then: the state worth seeing when it failed). Every `interval` seconds, or
    by default after 0.2 s, then half as long again each time up to a second: a condition met soon is seen soon, and
    a long wait (a JVM starting, a live job's batches) polls, reading tables or files, a few times, not hundreds."""
    deadline = time.monotonic() + timeout
    pause = interval or 0.2
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(pause)
        if interval is None:
            pause = min(pause * 1.5, 1.0)


def run_cli(args: list[str], env: dict, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        LAKEHOUSE + args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
        start_new_session=True, **kwargs,
    )


def problems_of(raw: dict) -> list[str]:
    """The registry validation problems of a raw registry document (which must be invalid)."""
    import pytest

    from include.registry import RegistryError, build_registry

    with pytest.raises(RegistryError) as err:
        build_registry(raw)
    return err.value.problems


def signal_group_when(command: list[str], env: dict, ready, signum: int, what: str) -> tuple[int, str]:
    """Start `command` in a session of its own, wait until `ready()`, send `signum` to its whole process group
    (as a terminal's Ctrl-C or `timeout` does); its exit code and output (stdout and stderr)."""
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        wait_for(ready, 180, what)
        os.killpg(process.pid, signum)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, output


def saved_registry(raw: dict, path: Path, env: dict):
    """`raw` built as the registry, and saved to `path` for the subprocesses of `env` (LAKEHOUSE_REGISTRY)."""
    import yaml

    from include.registry import build_registry

    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    env["LAKEHOUSE_REGISTRY"] = str(path)
    return build_registry(raw, path)
