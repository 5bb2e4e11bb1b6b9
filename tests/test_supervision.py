"""Live supervision (include/ops) with real job processes, plus health rules on synthetic progress."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from include import checkpoints
from include.failures import ExitCode
from include.ops import health as job_health
from include.ops import processes, supervisor
from include.records import bookkeeping, lease
from include.records.heartbeats import read_heartbeat, write_heartbeat
from include.records.query_progress import PROGRESS_SCHEMA
from include.registry import build_registry
from include.registry.operations import jvm_memory_bytes
from include.settings import load_settings
from include.storage import delta as delta_store
from tests.support.helpers import generate, landed, run_cli, wait_for
from tests.support.monitor import monitoring, prometheus, recorded_alerts, statuses
from tests.support.monitor import value as sampled

JOB = "bronze_clickstream"
LIVE_TRIGGER = "processing-time=5 seconds"


def registry_variant(path: Path, **supervision_overrides):
    """The real registry with a short live trigger for bronze (and supervision overrides), saved to `path`."""
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"][JOB]["triggers"] = {"live": LIVE_TRIGGER}
    raw["jobs"][JOB].pop("group", None)  # alone in its driver (groups: tests/test_groups.py)
    raw["jobs"][JOB]["supervision"] = {"backoff_seconds": 0, "stall_after_seconds": 60, **supervision_overrides}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return build_registry(raw, path)


def job_pids(settings) -> list[int]:
    """Live Python driver processes of <JOB> (spark-submit or `lakehouse run`) of this test's lakehouse root."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        driver = any(a.endswith((b"/bin/lakehouse", b"spark_jobs/entrypoints/run_job.py")) for a in argv)
        if (state != "Z" and b"python" in argv[0] and driver and JOB.encode() in argv
                and f"LAKEHOUSE_ROOT={settings.root}".encode() in environ):
            pids.append(int(entry.name))
    return sorted(pids)


@pytest.fixture
def live(settings, tmp_path):
    """Settings + registry (short trigger) for live tests; kills every job process of this root afterwards."""
    path = tmp_path / "jobs.yaml"
    registry = registry_variant(path)
    live_settings = replace(settings, registry_path=path)
    launched_before = set(processes.LAUNCHED)
    yield live_settings, registry
    ours = {pid: p for pid, p in processes.LAUNCHED.items() if pid not in launched_before}
    # Only unreaped children (their pids cannot have been reused) and live processes of this root.
    alive = [pid for pid, process in ours.items() if process.poll() is None]
    for pid in sorted(set(alive + job_pids(live_settings))):
        for signum in (signal.SIGCONT, signal.SIGKILL):
            processes.signal_group(pid, signum)
    for pid, process in ours.items():
        process.wait(timeout=60)
        del processes.LAUNCHED[pid]




def alerts(settings) -> list[dict]:
    return delta_store.read_table(settings.layout.ops_table("alerts")).to_pylist()


def batch_after(settings, registry, batch_id: int):
    """The job's health once it is healthy with a batch recorded after `batch_id`, else None."""
    health = job_health.check_job(settings, registry, JOB)
    done = health.last_batch_id is not None and health.last_batch_id > batch_id
    return health if done and health.healthy else None


@pytest.mark.spark
@pytest.mark.slow
def test_crash_and_stall_are_restarted_and_processing_goes_on(live, tmp_path, monkeypatch):
    """Each JVM start costs seconds, so one job lives through three: start, stall + restart, kill -9 + restart (the
    rules of the restart counter, each case: test_progress_after_a_restart_resets_the_counter)."""
    settings, registry = live
    monkeypatch.setenv("LAKEHOUSE_DRIVER_METRICS", "1")  # its drivers serve Spark's metrics: Prometheus finds them
    first = generate(settings, events=300, seed=61, files=2)
    assert supervisor.supervise_job(settings, registry, JOB, run_id="r1") == "started"
    wait_for(lambda: landed(settings) == first.lines, 120, "the first files in bronze")
    health = wait_for(lambda: batch_after(settings, registry, -1), 30, "the first batch's progress record")
    group = os.getsid(health.pid)  # the launched spark-submit: driver and JVM in one session
    assert group in processes.LAUNCHED and job_pids(settings) == [health.pid]
    assert supervisor.supervise_job(settings, registry, JOB) == "healthy"

    # Stall: the process hangs (SIGSTOP: lease held, no heartbeat, SIGTERM ignored) and is replaced.
    assert "stalled" not in job_health.check_job(settings, registry, JOB).problems
    assert "stalled" in job_health.check_job(settings, registry, JOB, now=time.time() + 3600).problems
    os.killpg(group, signal.SIGSTOP)
    impatient = registry_variant(tmp_path / "impatient.yaml", stall_after_seconds=1)
    wait_for(lambda: "stalled" in job_health.check_job(settings, impatient, JOB).problems, 30, "a stale heartbeat")
    monkeypatch.setattr(processes, "TERM_GRACE_SECONDS", 1.0)
    assert supervisor.supervise_job(settings, impatient, JOB, run_id="r2") == "restarted"
    assert processes.LAUNCHED[group].wait(timeout=30) == -signal.SIGKILL
    restarted = job_health.check_job(settings, registry, JOB)
    assert restarted.running and restarted.pid != health.pid and job_pids(settings) == [restarted.pid]
    state = bookkeeping.read_state(settings, JOB)
    assert state["restarts"] == 1 and state["pid_at_restart"] == restarted.pid

    second = generate(settings, events=200, seed=62, files=1)
    wait_for(lambda: landed(settings) == first.lines + second.lines, 120, "new files after the restart")
    wait_for(lambda: batch_after(settings, registry, state["batch_at_restart"]), 30, "a batch after the restart")
    from include.ops.health_report import build

    build(settings, registry)  # a live run's batches: the report draws their rates, and knows the trigger
    charts = json.loads((settings.layout.health_report / "health.json").read_text())[JOB]["charts"]
    assert "rows / s" in charts and any(charts["rows / s"]["processing"]), charts

    # Crash: kill -9 the driver's process group (its JVM included); the kernel releases the lease. It made progress
    # after its restart, though no supervision run saw it healthy since: the counter starts from 0 again. Prometheus
    # watches meanwhile (`lakehouse monitor`): the job down pages through Alertmanager, and its restart resolves it.
    with monitoring(settings) as watched:
        up = f'lakehouse_job_up{{job="{JOB}"}}'
        wait_for(lambda: list(sampled(watched, up).values()) == [1.0], 30, "Prometheus to see the job up")
        # the driver found through the heartbeat's address (file-based discovery): its own Spark metrics scraped
        wait_for(lambda: sorted((t["labels"]["job"], t["labels"].get("lakehouse_driver"), t["health"])
                                for t in prometheus(watched, "/api/v1/targets")["activeTargets"])
                 == [("lakehouse", None, "up"), ("spark_drivers", JOB, "up")], 30,
                 lambda: f"the endpoint and the driver up: {prometheus(watched, '/api/v1/targets')}")
        rate = f"metrics_lakehouse_driver_spark_streaming_{JOB}_inputRate_total_Value"
        wait_for(lambda: sampled(watched, rate), 30, "the query's streaming metrics from the driver")
        restarted_group = os.getsid(restarted.pid)
        os.killpg(restarted_group, signal.SIGKILL)
        processes.LAUNCHED[restarted_group].wait(timeout=30)
        assert not lease.is_held(settings, JOB)
        wait_for(lambda: statuses(watched, "LakehouseJobDown", job=JOB) == ["firing"], 60,
                 lambda: f"the job-down alert in ops.alerts: {recorded_alerts(watched)}")
        assert supervisor.supervise_job(settings, registry, JOB, run_id="r3") == "restarted"
        assert bookkeeping.read_state(settings, JOB)["restarts"] == 1
        third = job_health.check_job(settings, registry, JOB)
        assert third.running and third.pid not in (health.pid, restarted.pid) and job_pids(settings) == [third.pid]
        wait_for(lambda: statuses(watched, "LakehouseJobDown", job=JOB) == ["firing", "resolved"], 60,
                 "the job-down alert resolved")
    # nothing new to read: the restarted process's idle heartbeat is progress too, and a healthy run resets the count
    wait_for(lambda: (read_heartbeat(settings, JOB) or {}).get("status") == "idle"
             and read_heartbeat(settings, JOB)["pid"] == third.pid, 90, "an idle heartbeat of the restarted job")
    assert supervisor.supervise_job(settings, registry, JOB) == "healthy"
    assert "restarts" not in bookkeeping.read_state(settings, JOB)
    assert job_pids(settings) == [third.pid]

    reasons = {(a["run_id"], a["severity"]): a["reason"] for a in alerts(settings) if not a["alert"]}
    assert "started as pid" in reasons[("r1", "info")]
    assert reasons[("r2", "error")].startswith(f"stalled (pid {health.pid})")
    assert f"restarted as pid {restarted.pid}" in reasons[("r2", "error")]
    assert "crashed" in reasons[("r3", "error")] and f"restarted as pid {third.pid}" in reasons[("r3", "error")]


def test_progress_after_a_restart_resets_the_counter():
    """A batch committed after the last restart, or an idle heartbeat of the process that restart started, is
    progress; a heartbeat of another process, or no batch since, is not."""
    from include.ops.decision import Bookkeeping, progressed_since_restart
    from include.ops.health import Health

    def health(batch: int | None, beat: dict | None = None) -> Health:
        return Health(job=JOB, running=True, pid=7, heartbeat=beat, heartbeat_age_seconds=1.0, last_batch_id=batch)

    restarted = Bookkeeping.from_state({"restarts": 1, "batch_at_restart": 4, "pid_at_restart": 7})
    assert progressed_since_restart(restarted, health(5))
    assert not progressed_since_restart(restarted, health(4, {"status": "running", "pid": 7}))
    assert progressed_since_restart(restarted, health(4, {"status": "idle", "pid": 7}))
    assert not progressed_since_restart(restarted, health(4, {"status": "idle", "pid": 8}))
    before_any_batch = Bookkeeping.from_state({"restarts": 1, "batch_at_restart": -1})
    assert progressed_since_restart(before_any_batch, health(0))
    assert not progressed_since_restart(before_any_batch, health(None, {"status": "idle", "pid": 7}))


@pytest.mark.spark
@pytest.mark.slow
def test_one_writer_and_stop_on_request(live, lakehouse_env):
    settings, registry = live
    data = generate(settings, events=200, seed=63, files=1)

    # Two supervisors at once on a job that is not running: exactly one writer.
    barrier = threading.Barrier(2)
    actions: list[str] = []

    def supervise() -> None:
        barrier.wait()
        actions.append(supervisor.supervise_job(settings, registry, JOB))

    threads = [threading.Thread(target=supervise) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert sorted(actions) in (["refused", "started"], ["healthy", "started"]), actions
    owner = lease.holder(settings, JOB)
    assert owner is not None and job_pids(settings) == [owner.pid]

    # A writer started by hand is refused too, and so is an explicit start.
    env = {**lakehouse_env, "LAKEHOUSE_REGISTRY": str(settings.registry_path)}
    by_hand = run_cli(["run", JOB, "--trigger", LIVE_TRIGGER], env, timeout=120)
    assert by_hand.returncode == ExitCode.REFUSED, by_hand.stderr[-2000:]
    assert "refusing a second writer" in by_hand.stderr and f"pid {owner.pid}" in by_hand.stderr
    with pytest.raises(lease.LeaseHeld, match=f"pid {owner.pid}"):
        processes.start_job(settings, registry, JOB)
    assert job_pids(settings) == [owner.pid]

    # Idle with nothing to do: the listener's idle events keep the heartbeat fresh, so supervision
    # rounds past the stall limit find the same process healthy (status idle), never stalled.
    wait_for(lambda: landed(settings) == data.lines, 120, "the job to process its input")
    # Spark reports an idle query every 10 s (spark.sql.streaming.noDataProgressEventInterval).
    strict = registry_variant(settings.root / "strict.yaml", stall_after_seconds=25)
    wait_for(lambda: read_heartbeat(settings, JOB)["status"] == "idle", 60, "an idle heartbeat")
    for _ in range(3):  # about 3 x 12 s: beyond the 25 s stall limit
        time.sleep(12)  # the condition under test is that time passes without data
        assert supervisor.supervise_job(settings, strict, JOB) == "healthy"
    assert read_heartbeat(settings, JOB)["status"] == "idle" and lease.read_lease(settings, JOB).pid == owner.pid
    assert not any(a["severity"] == "error" for a in alerts(settings))

    # Stop on request: at a batch boundary, exit 0, lease released, and supervision leaves it stopped.
    group = os.getsid(owner.pid)
    assert processes.stop_job(settings, JOB, "maintenance", wait_seconds=120)
    beat = read_heartbeat(settings, JOB)
    assert beat["status"] == "stopped"
    committed = checkpoints.latest_committed_batch(settings.layout.checkpoint(JOB))  # not an idle event's next batch
    assert beat["batch_id"] == committed and f", last batch {committed}, " in beat["summary"], (committed, beat)
    assert not lease.is_held(settings, JOB) and not settings.layout.job_request("stop", JOB).exists()
    assert processes.LAUNCHED[group].wait(timeout=60) == 0
    assert supervisor.supervise_job(settings, registry, JOB, run_id="r4") == "stopped"
    assert not lease.is_held(settings, JOB) and job_pids(settings) == []
    assert any(a["run_id"] == "r4" and "maintenance" in a["reason"] for a in alerts(settings))
    assert supervisor.supervise_job(settings, registry, JOB, run_id="r5") == "stopped"  # said once, not every run
    assert [a["run_id"] for a in alerts(settings) if "stopped by request" in a["reason"]] == ["r4"]

    # Stopping a job that is not running leaves no request file; an explicit start clears the flag
    # (here the start itself fails: the registry file is missing, exit 2 with the reason in the job log).
    assert processes.stop_job(settings, JOB, "again")
    assert not settings.layout.job_request("stop", JOB).exists()
    assert bookkeeping.read_state(settings, JOB)["stopped_by_request"]["reason"] == "again"
    broken = replace(settings, registry_path=settings.root / "missing.yaml")
    with pytest.raises(RuntimeError, match="registry file not found"):
        processes.start_job(broken, registry, JOB)
    assert "stopped_by_request" not in bookkeeping.read_state(settings, JOB)


def test_a_run_discards_only_the_stop_requests_made_before_it_started(settings):
    """A request left by a run that ended without reading it is discarded by the next run; one made since the run
    began (a stop right after a start, before its query exists) is kept for it."""
    from include.records import job_requests

    began = datetime.now(UTC)
    assert job_requests.discard_older(settings, JOB, began) is None  # none to discard
    path = job_requests.request_stop(settings, JOB, "after the start")
    assert job_requests.discard_older(settings, JOB, began) is None and path.exists()
    left = job_requests.discard_older(settings, JOB, datetime.now(UTC) + timedelta(seconds=1))
    assert json.loads(left)["reason"] == "after the start" and job_requests.pending(settings, JOB) is None
    path.write_text("not json")  # unreadable: no run can have sent it
    assert job_requests.discard_older(settings, JOB, began) == "not json" and not path.exists()


def test_restart_backoff_and_giving_up(settings, tmp_path):
    """Crashed job (heartbeat 'running', no lease): restart policy bookkeeping, without Spark."""
    registry = registry_variant(tmp_path / "jobs.yaml", backoff_seconds=600, max_restarts=1)
    settings = replace(settings, registry_path=tmp_path / "jobs.yaml")
    write_heartbeat(settings, JOB, status="running", batch_id=3)
    bookkeeping.update_state(settings, JOB, restarts=1, next_allowed_at=time.time() + 600)
    assert supervisor.supervise_job(settings, registry, JOB) == "gave_up"
    bookkeeping.update_state(settings, JOB, restarts=0)
    assert supervisor.supervise_job(settings, registry, JOB) == "backing_off"
    alert_only = registry_variant(tmp_path / "alert.yaml", on_down="alert")
    assert supervisor.supervise_job(settings, alert_only, JOB) == "alerted"
    assert [a["severity"] for a in alerts(settings)] == ["error", "warning", "error"]


def test_the_watch_supervises_a_job_down_after_the_check_or_at_the_end_of_its_backoff(settings, tmp_path):
    """lakehouse_live's watch after its check: a job backing off is supervised at the first poll its backoff allows
    (not at the minute's recheck), and a job the check found healthy but down at the first poll (its driver lost in
    between) at once. Without Spark: the alert-only policy answers without starting anything."""
    from include.airflow import tasks

    registry = registry_variant(tmp_path / "jobs.yaml", on_down="alert")
    settings = replace(settings, registry_path=tmp_path / "jobs.yaml")
    write_heartbeat(settings, JOB, status="failed", batch_id=3)
    bookkeeping.update_state(settings, JOB, restarts=1, next_allowed_at=time.time() + 1)
    assert tasks.watch(settings, registry, JOB, {JOB: "backing_off"}, "r1", seconds=3, poll_seconds=0.2) == {
        JOB: "alerted"}
    bookkeeping.update_state(settings, JOB, next_allowed_at=None)
    assert tasks.watch(settings, registry, JOB, {JOB: "healthy"}, "r2", seconds=1, poll_seconds=0.2) == {
        JOB: "alerted"}
    # once each: a job found down and not restarted is not alerted on every poll
    assert sorted(a["run_id"] for a in alerts(settings)) == ["r1", "r2"]


# --- health rules on synthetic `_ops/query_progress` rows ------------------------------------------

def progress_rows(job_id: str, count: int, **overrides) -> list[dict]:
    """A healthy stateful job's batches: fast, keeping up, state bounded, watermark advancing."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(count):
        row = {
            "job": job_id, "query_id": "q1", "run_id": "r1", "batch_id": i,
            "progress_time": start + timedelta(seconds=10 * i), "num_input_rows": 100,
            "input_rows_per_second": 10.0, "processed_rows_per_second": 50.0, "batch_duration_ms": 1000,
            "trigger_execution_ms": 1000, "add_batch_ms": 800, "watermark": start + timedelta(minutes=i),
            "state_rows_total": 100, "state_rows_updated": 10, "state_rows_removed": 10,
            "state_rows_dropped_by_watermark": 0, "state_memory_used_bytes": 1000, "state_operators": "[]",
        }
        for key, value in overrides.items():
            row[key] = value(i) if callable(value) else value
        rows.append(row)
    return rows


@pytest.mark.parametrize(("job_id", "overrides", "expected"), [
    ("silver_clickstream", {}, []),
    ("silver_clickstream", {"batch_duration_ms": 45_000}, ["slow_batches"]),  # on bronze's commits: 30 s apart
    ("silver_clickstream", {"input_rows_per_second": 500.0}, ["falling_behind"]),
    ("silver_clickstream", {"state_rows_total": lambda i: 100 + i, "state_rows_removed": 0}, ["state_growing"]),
    ("gold_user_activity_5m", {"watermark": datetime(2026, 1, 1, tzinfo=UTC)}, ["watermark_stuck"]),
    ("silver_clickstream", {"watermark": None}, ["watermark_stuck"]),
    # no input, no watermark expectations; a stateless job has no watermark to watch
    ("silver_clickstream", {"watermark": None, "num_input_rows": 0}, []),
    ("bronze_clickstream", {"watermark": None}, []),
    ("gold_user_running_totals", {"watermark": None}, []),  # totals over all time: no watermark (found by the soak)
])
def test_health_problems_from_query_progress(settings, registry, job_id, overrides, expected):
    window = registry.job(job_id).supervision.health_window_batches
    older_query = [dict(r, query_id="q0", batch_duration_ms=90_000) for r in progress_rows(job_id, window)]
    rows = older_query + progress_rows(job_id, window, **overrides)
    delta_store.append_rows(settings.layout.ops_table("query_progress"), PROGRESS_SCHEMA, rows)
    write_heartbeat(settings, job_id, status="running", query_id="q1", batch_id=window - 1)
    health = job_health.check_job(settings, registry, job_id)
    assert health.problems == expected
    assert not health.running and not health.healthy and health.last_batch_id == window - 1


def test_partial_window_and_replayed_batches(settings, registry):
    job = registry.job("gold_user_activity_5m")
    partial = progress_rows(job.id, job.supervision.health_window_batches - 1, state_rows_total=lambda i: i,
                            state_rows_removed=0, watermark=None)
    assert job_health.diagnose(job, partial) == []  # growth and watermark need a full window
    slow = job.triggers["live"].interval_seconds * 1000 + 30_000  # above its live trigger
    slow_run = progress_rows(job.id, 4, batch_duration_ms=slow)
    assert job_health.diagnose(job, slow_run[:3]) == []  # a median needs 3 batches after the run's first
    assert job_health.diagnose(job, slow_run) == ["slow_batches"]
    # Restarts: each run's first batch is its driver's warm-up, not the job's pace; the runs' later batches are.
    restarts = [dict(row, run_id=f"r{n}") for n, row in enumerate(slow_run)]
    assert job_health.diagnose(job, restarts) == []
    assert job_health.diagnose(job, restarts + progress_rows(job.id, 4, run_id="r9", batch_duration_ms=slow)) == [
        "slow_batches"]
    # Batch 2 replayed after a crash: two records, the later one counts.
    replay = progress_rows(job.id, 1, batch_id=2, batch_duration_ms=60_000,
                           progress_time=datetime(2026, 1, 2, tzinfo=UTC))
    # beside them: an earlier query of the job (a new checkpoint) and another job, both further on
    others = progress_rows(job.id, 40, query_id="q0") + progress_rows("gold_user_sessions", 40)
    delta_store.append_rows(settings.layout.ops_table("query_progress"), PROGRESS_SCHEMA,
                            others + progress_rows(job.id, 3) + replay)
    batches = job_health.recent_batches(settings, job.id, "q1", 10)
    assert [(b["batch_id"], b["batch_duration_ms"]) for b in batches] == [(0, 1000), (1, 1000), (2, 60_000)]
    assert [b["batch_id"] for b in job_health.recent_batches(settings, job.id, "q1", 2)] == [1, 2]
    assert job_health.recent_batches(settings, job.id, "q'1", 2) == []  # a quote is a character, not SQL


# --- state health: thresholds, breaches, the report ---------------------------------------------

def test_state_health_thresholds(settings, registry):
    job = registry.job("gold_user_activity_5m")
    assert job.supervision.health.max_dropped_fraction == 0.05 and job.supervision.health.max_partition_skew == 10
    rows = progress_rows(job.id, 3)
    assert job_health.diagnose(job, rows, memory_bytes=10_000, partition_keys={0: [100, 90, 110, 95]}) == []
    dropped = progress_rows(job.id, 3, state_rows_dropped_by_watermark=lambda i: 10 * i)  # 30 of 300 input rows
    assert job_health.diagnose(job, dropped) == ["dropped_by_watermark"]
    assert job_health.diagnose(job, rows, memory_bytes=1100) == ["state_memory_high"]  # 1000 > 0.8 * 1100
    assert job_health.diagnose(job, rows, partition_keys={0: [5, 3, 400, 2]}) == ["partition_skew"]
    assert job_health.diagnose(job, rows, partition_keys={0: [0, 0, 40, 0]}) == []  # below skew_min_keys
    assert jvm_memory_bytes("2g") == 2 * 1024**3 and jvm_memory_bytes("512m") == 512 * 1024**2


def test_state_health_thresholds_in_the_registry(raw):
    from tests.support.helpers import problems_of

    raw["defaults"]["supervision"] = {"health": {"max_dropped_fraction": 0.2, "skew_min_keys": 10}}
    raw["jobs"]["gold_user_sessions"]["supervision"] = {"health": {"max_partition_skew": 4}}
    health = build_registry(raw).job("gold_user_sessions").supervision.health
    assert (health.max_dropped_fraction, health.skew_min_keys, health.max_partition_skew) == (0.2, 10, 4)
    raw["jobs"]["gold_user_sessions"]["supervision"] = {"health": {"max_partition_skew": 0.5, "skew": 3,
                                                                   "state_memory_fraction": 2}}
    found = problems_of(raw)
    where = "job 'gold_user_sessions': supervision.health"
    assert f"{where}.max_partition_skew: must be a number at least 1, got 0.5" in found
    assert f"{where}.state_memory_fraction: must be a number between 0 and 1, got 2" in found
    assert any(p.startswith(f"{where}: unknown fields ['skew']") for p in found)


def test_a_state_health_breach_alerts_fails_the_supervising_task_and_is_flagged(settings, registry, monkeypatch,
                                                                              tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from include.airflow import tasks
    from include.ops.health_report import build

    monkeypatch.setenv("LAKEHOUSE_ROOT", str(settings.root))
    raw = yaml.safe_load(settings.registry_path.read_text())
    raw["jobs"]["silver_clickstream"].pop("group", None)  # its task supervises it alone
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.setenv("LAKEHOUSE_REGISTRY", str(tmp_path / "jobs.yaml"))
    job = registry.job("silver_clickstream")
    window = job.supervision.health_window_batches
    delta_store.append_rows(settings.layout.ops_table("query_progress"), PROGRESS_SCHEMA,
                            progress_rows(job.id, window, state_rows_dropped_by_watermark=20))  # 20 % of the input
    write_heartbeat(settings, job.id, status="running", query_id="q1", batch_id=window - 1)
    held = lease.acquire(settings, job.id, trigger="processing-time=10 seconds")  # the job "runs" in this process
    try:
        assert job_health.check_job(settings, registry, job.id).problems == ["dropped_by_watermark"]
        assert supervisor.supervise_job(settings, registry, job.id, run_id="r1") == "breached"
        (alert,) = alerts(settings)
        assert alert["severity"] == "error" and "state health breached: dropped_by_watermark" in alert["reason"]
        with pytest.raises(AirflowFailException, match="silver_clickstream: state health breached"):
            tasks.supervise(job.id, {}, "r2")
        assert len(alerts(settings)) == 2
        index = build(settings, registry)
    finally:
        held.release()
    page = index.read_text()
    assert index == settings.layout.health_report_index
    assert 'id="silver_clickstream"' in page and "state health breached: dropped_by_watermark" in page
    chart = (index.parent / "silver_clickstream.svg").read_text()
    assert chart.startswith("<?xml") and "<svg" in chart
    assert "not run yet: no micro-batch recorded" in page  # the other jobs, which have no progress rows


def test_a_backfill_task_waits_for_another_catch_up_run_but_not_for_a_live_job(settings):
    """A backfill task's previous try still stopping (an available-now holder) is waited for; a live job is not."""
    catching_up = lease.acquire(settings, "bronze_clickstream", trigger="available-now")
    live = lease.acquire(settings, "silver_clickstream", trigger="processing-time=10 seconds")
    try:
        threading.Timer(1.5, catching_up.release).start()
        started = time.monotonic()
        assert lease.wait_while_catching_up(settings, ["bronze_clickstream", "silver_clickstream"], 30) == []
        assert 1.0 < time.monotonic() - started < 10
        assert lease.is_held(settings, "silver_clickstream")  # not waited for: the task skips it, naming it
        again = lease.acquire(settings, "bronze_clickstream", trigger="available-now")
        try:
            assert lease.wait_while_catching_up(settings, ["bronze_clickstream"], 0.5) == ["bronze_clickstream"]
        finally:
            again.release()
    finally:
        live.release()
