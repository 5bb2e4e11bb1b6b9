"""Airflow 3 plugin: serves the Great Expectations Data Docs and links them from the UI.

- `/lakehouse-data-docs/` on the API server serves LAKEHOUSE_ROOT/_reports/data_docs/.
- A "Data quality reports" entry in the navigation opens it.
- Every task gets a "Data quality report" extra link, so a failed run is one click from the report.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin
from airflow.sdk import BaseOperatorLink
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from include.settings import load_settings

URL_PREFIX = "/lakehouse-data-docs"
INDEX = f"{URL_PREFIX}/index.html"


def data_docs_app() -> FastAPI:
    directory = load_settings().layout.data_docs
    directory.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="Lakehouse Data Docs")
    app.mount("/", StaticFiles(directory=str(directory), html=True), name="data_docs")
    return app


class DataQualityReportLink(BaseOperatorLink):
    name = "Data quality report"

    def get_link(self, operator, *, ti_key) -> str:
        return INDEX


class LakehouseDataDocsPlugin(AirflowPlugin):
    name = "lakehouse_data_docs"
    fastapi_apps = [{"app": data_docs_app(), "url_prefix": URL_PREFIX, "name": "Lakehouse Data Docs"}]
    external_views = [
        {"name": "Data quality reports", "href": INDEX, "destination": "nav", "category": "browse",
         "url_route": "lakehouse-data-docs"}
    ]
    global_operator_extra_links = [DataQualityReportLink()]
