"""Benchmark: the production topology (`lakehouse cluster`: a Spark standalone master with 2 workers x 1 core,
Airflow's components on PostgreSQL) against the embedded default, one run each.

    .venv/bin/python bench/cluster_vs_local.py [--events 1000000] [--files 10] [--demo-events 20000]

1. A 1M-event backfill (bronze -> silver -> gold_user_activity_5m, available-now, `lakehouse run` of the three jobs
   in one driver) with the master `local[2]` and with the cluster's master (the driver here, executors on the
   workers), each on its own copy of the same landed files; the gold tables must agree.
2. The `lakehouse_backfill` DAG over the demo's data (every source, `lakehouse demo`'s generator settings): triggered
   through the cluster's API server and run by its scheduler, against `airflow dags test` on SQLite in local mode.
Each part gets a lakehouse, an Airflow home and a Kafka broker of its own under a scratch directory (removed after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.kafka.broker import free_port_pair  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402
from tests.support.airflow_api import AirflowApi  # noqa: E402

LAKEHOUSE = [sys.executable, "-m", "include.cli"]
JOBS = ["bronze_clickstream", "silver_clickstream", "gold_user_activity_5m"]


def environment(root: Path, **more: str) -> dict[str, str]:
    env = {**os.environ, "LAKEHOUSE_ROOT": str(root), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port_pair()}", **more}
    env.pop("LAKEHOUSE_SPARK_JAVA_OPTIONS", None)
    return env


def lakehouse(args: list[str], env: dict, timeout: float = 3600) -> float:
    """Run a `lakehouse` command; its wall time in seconds (fails loudly on a non-zero exit)."""
    started = time.monotonic()
    done = subprocess.run(LAKEHOUSE + args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"lakehouse {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def backfill_1m(work: Path, events: int, files: int, master: str) -> dict:
    landed = work / "landed"
    write_landing(landed, "clickstream", GeneratorConfig(events=events, seed=101, files=files))
    result = {}
    for name, spark_master in (("local[2]", "local[2]"), ("cluster 2 workers x 1 core", master)):
        root = work / name.split()[0].replace("[2]", "") / "lakehouse"
        shutil.copytree(landed, root / "landing" / "clickstream")  # copy2: the arrival order (mtimes) stays
        env = environment(root, LAKEHOUSE_SPARK_MASTER=spark_master)
        seconds = lakehouse(["run", *JOBS], env)
        rows = delta_store.count_rows(root / "gold" / "user_activity_5m")
        result[name] = {"seconds": round(seconds, 1), "gold_rows": rows,
                        "events_per_second": round(events / seconds)}
    local, cluster = result.values()
    assert local["gold_rows"] == cluster["gold_rows"], result
    return result


def demo_data(root: Path, env: dict, events: int) -> None:
    lakehouse(["kafka", "up"], env)
    registry_sources = json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from include.registry import load_registry; "
         "from include.settings import load_settings; r = load_registry(load_settings().registry_path); "
         "print(json.dumps(sorted({j.source.name for j in r.jobs.values() if j.source.kind in ('landing', 'kafka')})))"],
        env=env, cwd=REPO, capture_output=True, text=True, check=True).stdout)
    for source in registry_sources:
        lakehouse(["generate", "--source", source, "--events", str(events), "--seed", "7", "--files", "10"], env)


def dag_on_cluster(work: Path, events: int) -> tuple[dict, float]:
    root = work / "cluster_dag" / "lakehouse"
    env = environment(root)
    up = lakehouse(["cluster", "up", "--workers", "2"], env, timeout=600)
    try:
        demo_data(root, env, events)
        info = json.loads(subprocess.run(LAKEHOUSE + ["cluster", "status", "--json"], env=env, cwd=REPO,
                                         capture_output=True, text=True, check=True).stdout)
        api = AirflowApi(info["airflow_url"], info["airflow_user"], info["airflow_password"])
        started = time.monotonic()
        run_id = api.trigger("lakehouse_backfill", {})
        state = api.wait("lakehouse_backfill", run_id, timeout=3600)
        seconds = time.monotonic() - started
        if state != "success":
            raise SystemExit(f"lakehouse_backfill on the cluster: {state}: {api.task_states('lakehouse_backfill', run_id)}")
        return info, {"cluster_up_seconds": round(up, 1), "dag_run_seconds": round(seconds, 1)}
    finally:
        lakehouse(["cluster", "down"], env, timeout=600)


def dag_test_embedded(work: Path, events: int) -> dict:
    root = work / "dags_test" / "lakehouse"
    env = environment(root, AIRFLOW_HOME=str(work / "dags_test" / "airflow_home"))
    try:
        demo_data(root, env, events)
        lakehouse(["airflow-setup"], env)
        return {"dag_run_seconds": round(lakehouse(["airflow", "dags", "test", "lakehouse_backfill"], env), 1)}
    finally:
        lakehouse(["kafka", "down"], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--demo-events", type=int, default=20_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        info, on_cluster = dag_on_cluster(work, args.demo_events)
        embedded = dag_test_embedded(work, args.demo_events)
        # part 1 on a cluster of its own, its lakehouse elsewhere: the cluster serves any path it can reach
        cluster_root = work / "cluster_1m" / "lakehouse"
        env = environment(cluster_root)
        lakehouse(["cluster", "up", "--workers", "2"], env, timeout=600)
        try:
            backfill = backfill_1m(work, args.events, args.files, info["spark_master"])
        finally:
            lakehouse(["cluster", "down"], env, timeout=600)
        print(json.dumps({"backfill_1m_events": backfill,
                          "lakehouse_backfill_dag_demo_data": {"cluster (scheduler, API trigger)": on_cluster,
                                                               "dags test (SQLite, local[2])": embedded}},
                         indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
