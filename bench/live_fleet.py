"""Benchmark: the default registry's whole live set started as `lakehouse_live` starts it, grouped (a driver per
registry group) and one job per driver.

    .venv/bin/python bench/live_fleet.py [--seconds 90] [--modes groups,alone]

Per mode, in a fresh lakehouse with a Kafka broker (payments are a Kafka source): every source gets data first,
then more every 15 s; the `lakehouse_live` task body (`include.airflow.tasks.supervise`) runs for every unit at once,
as the DAG's parallel tasks do (its watch off), with admission as configured (`alone`: LAKEHOUSE_LIVE_DRIVERS=16,
one slot per job). Reported: seconds until every live job runs with a batch recorded, and until every one is healthy
(no problem of `lakehouse health`; the problems left at the end otherwise), JVMs and the resident memory of every
process of the lakehouse's drivers (JVMs, Python drivers and workers, by kind; not the broker's; the peak of
samples every 5 s over `--seconds` after that), and the batches of that window against their trigger.
Goal on 2 cores / 24 GB (issue 25): every live job healthy within 3 minutes, at most 4 JVMs, at most 8 GB resident,
batches within their trigger.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from include.entrypoints import lakehouse_command  # noqa: E402
from include.generator import DEFAULT_START, GeneratorConfig  # noqa: E402
from include.kafka import broker  # noqa: E402
from include.settings import load_settings  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def registry_for(mode: str, path: Path) -> None:
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    if mode == "alone":
        raw.pop("groups", None)
        for job in raw["jobs"].values():
            job.pop("group", None)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def processes_of(root: Path) -> list[tuple[int, str, int]]:
    """(pid, kind, resident bytes) of every process whose environment names this lakehouse root."""
    found = []
    marker = f"LAKEHOUSE_ROOT={root}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            resident = int((entry / "statm").read_text().split()[1]) * PAGE
            parent = proc_stat(int(entry.name))[1]
            if argv[0].endswith(b"java") and argv == Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0"):
                continue  # a JVM's child between its fork and exec (Hadoop runs chmod, readlink): its parent's memory
        except (OSError, ValueError, IndexError):
            continue
        if argv and argv[0].endswith(b"java"):
            kind = "driver_jvm" if b"org.apache.spark.deploy.SparkSubmit" in argv else (
                "broker_jvm" if b"kafka.Kafka" in argv else "other_jvm")
        elif b"pyspark.daemon" in argv or b"pyspark.worker" in argv:
            kind = "python_worker"
        else:
            kind = "python_driver" if b"python" in argv[0] else "other"
        found.append((int(entry.name), kind, resident))
    return found


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command (state, parent pid, ..., user and system ticks at 11, 12)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> str:
    """The parent's pid and command, to tell the drivers' JVMs apart."""
    try:
        parent = int(proc_stat(pid)[1])
        command = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
        return f"{parent} {command}"
    except (OSError, ValueError, IndexError):
        return "?"


def feed(settings, registry, stop: threading.Event, rounds: list[int]) -> None:
    """New data for every landing and Kafka source every 15 s, each round two hours of event time after the last. On
    time: no event later than the watermarks (the generator's `late_fraction` 0; disorder within them, duplicates and
    malformed lines stay), and rounds that do not overlap (a round's payments come up to 105 minutes after its first
    purchase), so a `dropped_by_watermark` problem would be the platform's, not the data's."""
    from include.cli import generate_into
    from include.generator import generated_sources

    sources = generated_sources(registry)
    round_ = 0
    while not stop.is_set():
        start = DEFAULT_START + timedelta(hours=2 * round_)
        for number, source in enumerate(sources.values()):
            generate_into(settings, source, GeneratorConfig(events=300, seed=1000 * round_ + number, files=1,
                                                            start=start, users=50, late_fraction=0.0))
        round_ += 1
        rounds.append(round_)
        stop.wait(15)


def run_mode(mode: str, seconds: int) -> dict:
    from include.airflow import tasks
    from include.ops.health import check_job
    from include.records.query_progress import PROGRESS_TABLE
    from include.registry import load_registry
    from include.storage import delta as delta_store

    work = Path(tempfile.mkdtemp(prefix=f"bench-fleet-{mode}-"))
    bootstrap = f"127.0.0.1:{broker.free_port_pair()}"
    registry_for(mode, work / "jobs.yaml")
    os.environ.update({"LAKEHOUSE_ROOT": str(work / "lakehouse"), "LAKEHOUSE_REGISTRY": str(work / "jobs.yaml"),
                       "LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap, "PYSPARK_PYTHON": sys.executable,
                       "LAKEHOUSE_LIVE_WATCH_SECONDS": "0", "LAKEHOUSE_LOG_LEVEL": "WARNING",
                       "LAKEHOUSE_LIVE_DRIVERS": "16" if mode == "alone" else os.environ.get("LAKEHOUSE_LIVE_DRIVERS",
                                                                                            "4")})
    settings = load_settings()
    from include.airflow.environment import airflow_environment

    os.environ.update(airflow_environment(settings))  # connection spark_default, as the DAG's tasks have it
    registry = load_registry(settings.registry_path)
    units = registry.live_units()
    live = [j for members in units.values() for j in members]
    broker.up(settings, bootstrap)
    stop_feeding, rounds = threading.Event(), []
    feeder = threading.Thread(target=feed, args=(settings, registry, stop_feeding, rounds), daemon=True)
    try:
        feeder.start()
        while not rounds:
            time.sleep(0.5)
        started = time.monotonic()
        outcomes: dict[str, object] = {}

        def supervise(unit: str) -> None:
            try:
                outcomes[unit] = tasks.supervise(unit, {}, f"bench-{mode}")
            except Exception as exc:  # reported, not raised: the other units go on
                outcomes[unit] = f"failed: {exc}"

        threads = [threading.Thread(target=supervise, args=(u,)) for u in units]
        for thread in threads:
            thread.start()
        running_after = healthy_after = None
        while time.monotonic() - started < 420:
            states = {j: check_job(settings, registry, j) for j in live}
            if running_after is None and all(h.running and h.last_batch_id is not None for h in states.values()):
                running_after = round(time.monotonic() - started, 1)
            if running_after is not None and time.monotonic() - started > running_after + 90:
                break  # healthy or not by now: the window measures what it is
            if all(h.running and h.healthy and h.last_batch_id is not None for h in states.values()):
                healthy_after = round(time.monotonic() - started, 1)
                break
            time.sleep(10)
        for thread in threads:
            thread.join(timeout=600)
        window_start = time.time()
        peak_jvms = peak_driver_jvms = peak_resident = 0
        by_kind: dict[str, int] = {}
        jvms_at_peak: list = []
        while time.time() - window_start < seconds:
            found = [p for p in processes_of(settings.root) if p[1] != "broker_jvm"]  # the drivers' processes
            peak_jvms = max(peak_jvms, sum(1 for _, kind, _ in found if kind.endswith("jvm")))
            peak_driver_jvms = max(peak_driver_jvms, sum(1 for _, kind, _ in found if kind == "driver_jvm"))
            resident = sum(r for _, _, r in found)
            if resident > peak_resident:
                peak_resident = resident
                by_kind = {k: sum(r for _, kind, r in found if kind == k) for k in {kind for _, kind, _ in found}}
                jvms_at_peak = [(pid, kind, _parent(pid)) for pid, kind, _ in found if kind.endswith("jvm")]
            time.sleep(5)
        rows = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
        problems = {j: h.problems for j in live if (h := check_job(settings, registry, j)).problems or not h.running}
    finally:
        stop_feeding.set()
        subprocess.run([*lakehouse_command(), "stop", "--all", "--wait", "300"], cwd=REPO,
                       capture_output=True, timeout=400)
        for pid, _, _ in processes_of(settings.root):  # whatever did not stop (the next mode measures alone)
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        broker.down(settings)
    recent = [r for r in rows if r.get("batch_duration_ms") is not None and r.get("progress_time")
              and _epoch(r["progress_time"]) >= window_start and r.get("num_input_rows")]
    trigger_ms = {j: registry.live_interval_seconds(j) * 1000 for j in live}  # on-upstream-commit: the upstream's
    durations = [r["batch_duration_ms"] for r in recent]
    return {
        "mode": mode, "units": len(units), "live_jobs": len(live),
        "running_with_a_batch_after_seconds": running_after, "healthy_after_seconds": healthy_after,
        "problems_at_the_end": problems, "supervise_outcomes": {u: str(o)[:200] for u, o in outcomes.items()},
        "peak_jvms": peak_jvms, "peak_driver_jvms": peak_driver_jvms, "peak_resident_gb": round(peak_resident / 1024**3, 2),
        "resident_gb_at_the_peak_by_kind": {k: round(v / 1024**3, 2) for k, v in sorted(by_kind.items())},
        "jvms_at_the_peak": jvms_at_peak,
        "batches_with_input": len(recent),
        "batch_ms_median": statistics.median(durations) if durations else None,
        "batch_ms_max": max(durations) if durations else None,
        "batch_ms_median_per_job_vs_trigger": {
            j: [statistics.median(d), trigger_ms[j]] for j in live
            if (d := [r["batch_duration_ms"] for r in recent if r["job"] == j])},
        "batches_over_trigger": sum(1 for r in recent if r["batch_duration_ms"] > trigger_ms.get(r["job"], 10_000)),
        "data_rounds": len(rounds), "work": str(work),
    }


def _epoch(value) -> float:
    from datetime import datetime

    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=90, help="the measured window once every job is healthy")
    parser.add_argument("--modes", default="groups,alone")
    parser.add_argument("--out", type=Path, default=None, help="also write the results (JSON) there")
    args = parser.parse_args()
    results = []
    for mode in args.modes.split(","):
        results.append(run_mode(mode, args.seconds))
        if args.out:
            args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
