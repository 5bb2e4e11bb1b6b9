"""The project's DAGs as Airflow loads them, and what their runs stored in the metadata DB (in-process readers)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.helpers import REPO


def dagbag():
    """The project's `dags/` folder parsed by Airflow's own DagBag."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


@contextmanager
def executor_workers_from_a_fresh_process() -> Iterator[None]:
    """`dag.test(use_executor=True)` with the LocalExecutor's workers started by a fork server (Airflow's
    `[core] mp_start_method = forkserver`) rather than forked from this pytest worker: a worker that used delta-rs
    in-process before holds its tokio runtime, and tokio panics in a forked child. The start method is restored."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("forkserver", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(previous, force=True)


def run_through_the_executor(dag_id: str, server_log: Path, task_ids: Sequence[str] = ()):
    """One run of a DAG (only `task_ids` and their upstream, when given) as the scheduler's executor runs it (task
    processes that talk to the Execution API served by the API server writing `server_log`, and write the logs the
    UI shows); its DagRun. A run the executor could not finish fails with what it saw: Airflow's "state mismatch"
    records, each task's log, the server's last lines."""
    started = time.time()
    dag = dagbag().dags[dag_id]
    if task_ids:
        dag = dag.partial_subset(task_ids=list(task_ids))
    try:
        with executor_workers_from_a_fresh_process(), tasks_at_once(os.cpu_count() or 2):
            return dag.test(use_executor=True)
    except Exception as error:
        raise AssertionError(f"{dag_id} through the executor: {error!r}\n{what_the_executor_saw(dag_id, started)}"
                             f"\n--- the API server's last lines:\n{server_log.read_text()[-4000:]}") from error


@contextmanager
def tasks_at_once(limit: int) -> Iterator[None]:
    """The LocalExecutors created inside run at most `limit` tasks at once (`dag.test` queues every ready task; the
    scheduler would also count pools and each DAG's max_active_tasks). Twelve quality tasks at once on two cores
    made the SQLite-backed API server answer task starts in up to 4.9 s, next to the workers' 5 s timeout."""
    from airflow.executors.local_executor import LocalExecutor

    original = LocalExecutor.__init__

    def bounded(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.parallelism = min(self.parallelism, limit)

    LocalExecutor.__init__ = bounded
    try:
        yield
    finally:
        LocalExecutor.__init__ = original


def what_the_executor_saw(dag_id: str, since: float) -> str:
    """Airflow's audit records of a DAG's state mismatches and the end of each task log written since `since`."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        mismatches = session.scalars(select(Log.extra).where(Log.dag_id == dag_id, Log.event == "state mismatch"))
        lines = [f"state mismatch: {extra}" for extra in mismatches]
    folder = Path(os.environ.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or Path(os.environ["AIRFLOW_HOME"]) / "logs")
    for log in sorted((folder / f"dag_id={dag_id}").rglob("*.log")):
        if log.stat().st_mtime >= since:
            lines.append(f"--- {log.relative_to(folder)}:\n{log.read_text(errors='replace')[-2500:]}")
    return "\n".join(lines) or "no state mismatch recorded, no task log written"


def stored_xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value"):
    """A value a task of a run stored in XCom (operator links live there too)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        value = session.scalar(select(XComModel.value).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.task_id == task_id,
            XComModel.key == key))
    return json.loads(value) if isinstance(value, str) and value[:1] in ('"', "{", "[") else value


def report_link(dag_id: str, run_id: str, task_id: str) -> str:
    """The "Data quality report" link Airflow stored for a task of a run."""
    from include.airflow.operators import QualityReportLink

    return stored_xcom(dag_id, run_id, task_id, QualityReportLink().xcom_key)
