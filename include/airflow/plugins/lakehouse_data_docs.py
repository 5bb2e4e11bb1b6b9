"""Airflow 3 plugin: serves the Great Expectations Data Docs and links them from the UI.

- `/lakehouse-data-docs/` on the API server serves LAKEHOUSE_ROOT/_reports/data_docs/.
- A "Data quality reports" entry in the navigation opens it.
- The quality tasks' "Data quality report" link (include.airflow.operators.QualityReportLink) opens their
  run's result under the same path.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from include.airflow.docs import DATA_DOCS_URL_PREFIX, data_docs_path
from include.settings import load_settings

URL_PREFIX = DATA_DOCS_URL_PREFIX
INDEX = data_docs_path("index.html")


def data_docs_app() -> FastAPI:
    directory = load_settings().layout.data_docs
    directory.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="Lakehouse Data Docs")
    app.mount("/", StaticFiles(directory=str(directory), html=True), name="data_docs")
    return app


class LakehouseDataDocsPlugin(AirflowPlugin):
    name = "lakehouse_data_docs"
    fastapi_apps = [{"app": data_docs_app(), "url_prefix": URL_PREFIX, "name": "Lakehouse Data Docs"}]
    external_views = [
        {"name": "Data quality reports", "href": INDEX, "destination": "nav", "category": "browse",
         "url_route": "lakehouse-data-docs"}
    ]
