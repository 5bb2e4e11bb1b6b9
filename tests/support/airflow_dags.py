"""The project's DAGs as Airflow loads them, and what their runs stored in the metadata DB (in-process readers)."""

from __future__ import annotations

import json

from tests.support.helpers import REPO


def dagbag():
    """The project's `dags/` folder parsed by Airflow's own DagBag."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


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
