"""A Spark standalone master and its workers, from the pip package's `spark-class` (which has no sbin/ scripts)."""

from __future__ import annotations

import os
import sys

from include.cluster.topology import HOST, WORKER_CORES, WORKER_MEMORY, Topology
from include.daemons import Daemon, get_json, spark_home


def master_daemon(top: Topology) -> Daemon:
    return Daemon("spark-master", top.run / "spark-master.pid", top.logs / "spark-master.log")


def worker_daemon(top: Topology, number: int) -> Daemon:
    return Daemon(f"spark-worker-{number}", top.run / f"spark-worker-{number}.pid",
                  top.logs / f"spark-worker-{number}.log")


def environment(top: Topology) -> dict[str, str]:
    """The master's and workers' environment: executors' Python workers run this interpreter (the venv's)."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST,
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_DAEMON_MEMORY": "512m"}


def start_master(top: Topology) -> None:
    master_daemon(top).start(
        [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", HOST,
         "--port", str(top.ports.spark_master), "--webui-port", str(top.ports.spark_master_ui)],
        env=environment(top), cwd=top.spark_dir)


def start_worker(top: Topology, number: int) -> None:
    """A worker with its own working directory (executors run there, not in the project's tree)."""
    directory = top.spark_dir / f"worker-{number}"
    (directory / "work").mkdir(parents=True, exist_ok=True)
    worker_daemon(top, number).start(
        [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", top.spark_master,
         "--host", HOST, "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
         "--webui-port", str(top.ports.spark_master_ui + number), "--work-dir", str(directory / "work")],
        env=environment(top), cwd=directory)


def master_state(top: Topology) -> dict | None:
    """The master's JSON API (`/json/`: status, workers, active and completed applications), or None."""
    return get_json(f"{top.spark_master_ui}/json/")


def alive_workers(state: dict | None) -> int:
    return sum(1 for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE")
