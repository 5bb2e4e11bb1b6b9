"""Benchmark: how a live driver's RocksDB state store should commit: a snapshot every batch
(`state_store.changelog_checkpointing: false`), a changelog per batch with snapshots in the background (`true`), or
changelogs in live runs and snapshots in available-now runs (`live`).

    .venv/bin/python bench/state_commit_modes.py [--minutes 6] [--users 100000] [--events 4000] [--trigger 10]
                                                 [--modes false,true,live]

For each mode, in a new lakehouse: bronze, silver and two stateful gold jobs of the shipped registry in one live
driver (`lakehouse run --group state`, processing-time triggers of `--trigger` seconds): the per-user running totals
(state = one row per user ever seen: it only grows) and the sessions (state = the open sessions). A landing file of
`--events` clickstream events over `--users` users arrives every trigger for `--minutes`; then the driver stops, one
more file lands and the four jobs catch up in one available-now driver: its first batch of each stateful job loads
the state (a snapshot, or a snapshot and the changelogs after it). Reported per mode and stateful job, from
`_ops/query_progress`: batch seconds and the state commit's milliseconds (p50 / p95 over the batches with input),
RocksDB's files and bytes copied into the checkpoint per batch, the state rows, the checkpoint's files and MB at the
end, and the first batch after the restart (its seconds; RocksDB's load and changelog replay).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.live_latency import percentiles  # noqa: E402
from include.entrypoints import lakehouse_command  # noqa: E402
from include.generator import DEFAULT_START, GeneratorConfig, write_landing  # noqa: E402
from include.settings import load_settings  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_running_totals", "gold_user_sessions")
STATEFUL = JOBS[2:]
GROUP = "state"


def bench_registry(base: Path, path: Path, trigger: int, changelog: bool | str) -> None:
    raw = yaml.safe_load(base.read_text())
    raw["jobs"] = {job: {**raw["jobs"][job], "group": GROUP,
                         "triggers": {**raw["jobs"][job].get("triggers", {}), "live": f"processing-time={trigger} seconds"}}
                   for job in JOBS}
    for job in raw["jobs"].values():
        job.pop("quality", None)
    raw.pop("groups", None)
    raw["sources"] = {"clickstream": raw["sources"]["clickstream"]}
    raw["defaults"]["state_store"]["changelog_checkpointing"] = changelog
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def tree(path: Path) -> dict:
    sizes = [f.stat().st_size for f in path.rglob("*") if f.is_file()] if path.is_dir() else []
    return {"files": len(sizes), "mb": round(sum(sizes) / 2**20, 2)}


def land(settings, args: argparse.Namespace, number: int) -> None:
    config = GeneratorConfig(events=args.events, seed=number, files=1, users=args.users, late_fraction=0.0,
                             start=DEFAULT_START + timedelta(seconds=args.trigger * number),
                             events_per_minute=args.events * 60 / args.trigger)  # event time keeps up with the clock
    write_landing(settings.layout.landing("landing/clickstream"), "clickstream", config)


def run_mode(args: argparse.Namespace, changelog: bool | str) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    env = {**os.environ, "LAKEHOUSE_ROOT": str(work / "lakehouse"), "LAKEHOUSE_REGISTRY": str(work / "jobs.yaml"),
           "LAKEHOUSE_LOCAL_DIR": str(work), "PYSPARK_PYTHON": sys.executable, "LAKEHOUSE_LOG_LEVEL": "WARNING"}
    bench_registry(load_settings().registry_path, work / "jobs.yaml", args.trigger, changelog)
    os.environ.update({k: env[k] for k in ("LAKEHOUSE_ROOT", "LAKEHOUSE_REGISTRY", "LAKEHOUSE_LOCAL_DIR")})
    settings = load_settings()
    number = 0
    land(settings, args, number)
    log = (work / "live.log").open("w")
    driver = subprocess.Popen([*lakehouse_command(), "run", "--group", GROUP], env=env, cwd=REPO,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not all(settings.layout.heartbeat(job).exists() for job in JOBS):
            if time.monotonic() > deadline or driver.poll() is not None:
                raise SystemExit(f"the live jobs did not start; log in {work}")
            time.sleep(1)
        until = time.monotonic() + args.minutes * 60
        while time.monotonic() < until:
            number += 1
            land(settings, args, number)
            time.sleep(args.trigger)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGTERM)
        driver.wait(timeout=300)
    live = progress(settings)
    land(settings, args, number + 1)
    started = time.monotonic()
    subprocess.run([*lakehouse_command(), "run", *JOBS, "--trigger", "available-now"], env=env,
                   cwd=REPO, check=True, stdout=(work / "catch-up.log").open("w"), stderr=subprocess.STDOUT)
    catch_up = round(time.monotonic() - started, 1)
    rows = progress(settings)
    restart_runs = {r["run_id"] for r in rows} - {r["run_id"] for r in live}
    result = {"changelog_checkpointing": changelog, "work": str(work), "catch_up_driver_seconds": catch_up, "jobs": {}}
    for job in STATEFUL:
        batches = [r for r in live if r["job"] == job and r["num_input_rows"]]
        operators = [json.loads(r["state_operators"]) for r in batches]
        rocks = [{k: sum(op["rocksdb"].get(k, 0) for op in ops) for k in ("rocksdbFilesCopied", "rocksdbBytesCopied")}
                 for ops in operators]
        first = min((r for r in rows if r["job"] == job and r["run_id"] in restart_runs), key=lambda r: r["batch_id"])
        result["jobs"][job] = {
            "batches": len(batches),
            "batch_seconds": percentiles([r["batch_duration_ms"] / 1000 for r in batches]),
            "state_commit_ms": percentiles([sum(op["commitTimeMs"] for op in ops) for ops in operators]),
            "files_copied_per_batch": percentiles([r["rocksdbFilesCopied"] for r in rocks]),
            "mb_copied_per_batch": percentiles([r["rocksdbBytesCopied"] / 2**20 for r in rocks]),
            "state_rows_at_end": batches[-1]["state_rows_total"] if batches else None,
            "checkpoint_at_end": tree(Path(str(settings.layout.checkpoint(job))) / "state"),
            "first_batch_after_restart_seconds": round(first["batch_duration_ms"] / 1000, 2),
            "first_batch_after_restart_rocksdb": {  # loading the state: milliseconds, changelog files replayed
                k: sum(op["rocksdb"].get(k, 0) for op in json.loads(first["state_operators"]))
                for k in ("rocksdbLoadLatencyMs", "rocksdbReplayChangeLogLatencyMs", "rocksdbNumReplayChangelogFiles")},
        }
    return result


def progress(settings) -> list[dict]:
    from include.records.query_progress import PROGRESS_TABLE
    from include.storage import delta as delta_store

    return delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="of live data per mode")
    parser.add_argument("--users", type=int, default=100_000, help="distinct users (the running totals' state rows)")
    parser.add_argument("--events", type=int, default=4000, help="events per landing file (one per trigger)")
    parser.add_argument("--trigger", type=int, default=10, help="the live jobs' processing-time interval, seconds")
    parser.add_argument("--modes", default="false,true,live", help="changelog_checkpointing values, in this order")
    args = parser.parse_args()
    modes = {"false": False, "true": True, "live": "live"}
    results = [run_mode(args, modes[name]) for name in args.modes.split(",")]
    print(json.dumps({"minutes": args.minutes, "users": args.users, "events_per_file": args.events,
                      "trigger_seconds": args.trigger, "modes": results}, indent=2))


if __name__ == "__main__":
    main()
