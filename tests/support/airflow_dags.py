"""The project's DAGs as Airflow loads them, and what their runs stored in the metadata DB (in-process readers)."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager

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
