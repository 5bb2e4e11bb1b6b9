"""The environment Airflow runs in for this project (no Airflow import here).

Airflow reads its configuration from environment variables when it is imported, so every way of
running it (`make airflow`, `lakehouse airflow ...`, `make demo`, the tests) builds it here.
Connections come from the declarative file `include/airflow/connections.json` through Airflow's
local-filesystem secrets backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from include.connections import secrets_environment
from include.settings import REPO_ROOT, Settings

SPARK_POOL = "lakehouse_spark"  # every task that runs a Spark driver takes one slot
DAGS_FOLDER = REPO_ROOT / "dags"
PLUGINS_FOLDER = REPO_ROOT / "include" / "airflow" / "plugins"


def airflow_home() -> Path:
    """`AIRFLOW_HOME` if set, else `airflow_home/` in the repo (SQLite metadata DB, logs)."""
    return Path(os.environ.get("AIRFLOW_HOME") or REPO_ROOT / "airflow_home").resolve()


def airflow_environment(settings: Settings) -> dict[str, str]:
    """os.environ plus what Airflow needs to run this project's DAGs on the embedded defaults."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home()),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # Spark drivers beside the triggerer on a small machine starve its event loop for a moment now and
            # then; at Airflow's 0.2 s every such moment was an INFO line (thousands an hour). 5 s still
            # shows a trigger that really blocks.
            "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD": env.get(
                "AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD", "5"),
            # A task process waits this long for each answer of the Execution API (Airflow: 5 s). Beside Spark
            # drivers on two cores, the SQLite-backed API server took up to 4.9 s to mark a task started.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": env.get("AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", "30"),
            "AIRFLOW__CORE__EXECUTOR": env.get("AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
            **secrets_environment(),
            **settings.storage_environment(),
            "LAKEHOUSE_REGISTRY": str(settings.registry_path),
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p),
        }
    )
    return env


def airflow_command() -> list[str]:
    return [str(Path(sys.executable).parent / "airflow")]


def start_airflow(settings: Settings, args: list[str], log_file: Path | None = None, env: dict | None = None):
    """Start an `airflow` CLI command with the project's environment (or `env`), its output appended to `log_file`
    (or on this process's terminal when None); returns the subprocess.Popen."""
    command, env = airflow_command() + args, env or airflow_environment(settings)
    if log_file is None:
        return subprocess.Popen(command, env=env, cwd=REPO_ROOT)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a") as out:
        out.write(f"\n$ airflow {' '.join(args)}\n")
        out.flush()
        return subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)


def setup_steps(settings: Settings) -> list[list[str]]:
    """The `airflow` commands that prepare the metadata database: the schema, then the Spark pool sized for
    this machine (LAKEHOUSE_SPARK_POOL_SLOTS; `airflow pools set` again, or the UI, changes it)."""
    return [["db", "migrate"],
            ["pools", "set", SPARK_POOL, str(settings.spark_pool_slots),
             "Spark drivers at once: each runs local[2]; more than the cores can host fail to start Python workers"]]


def run_airflow(settings: Settings, args: list[str], log_file: Path | None = None, env: dict | None = None) -> int:
    """Run an `airflow` CLI command with the project's environment (output: see :func:`start_airflow`)."""
    return start_airflow(settings, args, log_file, env).wait()
