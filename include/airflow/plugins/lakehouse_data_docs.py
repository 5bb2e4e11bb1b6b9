"""Airflow 3 plugin: serves the Great Expectations Data Docs, behind Airflow's login, and links them from the UI.

- `/lakehouse-data-docs/` on the API server serves LAKEHOUSE_ROOT/_reports/data_docs/ (on a local disk or S3,
  read through the storage interface on every request) to users signed in to
  Airflow (the UI's `_token` cookie, or `Authorization: Bearer <token>` from `POST /auth/token`); anyone
  else gets 401 (no credential) or 403 (a bad one). Only regular files inside that folder are served: `..`
  (also percent-encoded), absolute paths and symbolic links are refused with 404.
- The JS and CSS that Great Expectations' pages load from public CDNs are served from the project's
  offline copies (include/airflow/data_docs_assets.py), so the report renders in a closed network.
- `/lakehouse-health/` serves the pipeline-health report (LAKEHOUSE_ROOT/_reports/health/) the same way, opened
  by the "Pipeline health report" entry beside it.
- `/lakehouse-docs/` serves the project's documentation site (`make docs` builds it into `site/`; `make airflow`
  does) the same way: the DAGs' docs and the approval text link into it, and a "Lakehouse documentation" entry under
  Browse opens it.
- A "Data quality reports" entry under Browse opens it (at its own address, not embedded). A validation page made
  by an Airflow task gets a bar at its top linking back to that task (from the stored validation result). The quality tasks' "Data quality report" link
  (include.airflow.operators.QualityReportLink) opens their run's result under the same path.
"""

from __future__ import annotations

import html
import json
import mimetypes
import re
from collections.abc import Callable
from urllib.parse import unquote

from airflow.api_fastapi.core_api.security import get_user
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, Response

from include.airflow import data_docs_assets
from include.airflow.docs import (
    DATA_DOCS_URL_PREFIX,
    DOCS_SITE,
    DOCS_URL_PREFIX,
    HEALTH_URL_PREFIX,
    data_docs_path,
)
from include.quality.gx_context import AIRFLOW_TASK_META
from include.settings import load_settings
from include.storage.paths import LocalPath, StoragePath

URL_PREFIX = DATA_DOCS_URL_PREFIX
INDEX = data_docs_path("index.html")


def safe_file(directory: StoragePath, requested: str) -> StoragePath | None:
    """The regular file `requested` names inside `directory` (its index.html for a folder), or None when the
    path leaves the folder, is absolute, or passes through a symbolic link (local roots)."""
    parts = [p for p in requested.split("/") if p not in ("", ".")]
    if requested.startswith("/") or any(p == ".." or "\\" in p or "\0" in p for p in parts):
        return None
    path = directory
    for part in parts:
        path = path / part
        if path.is_local and path.is_symlink():
            return None
    if path.is_file():
        return path
    path = path / "index.html"  # a folder's page
    if path.is_local and path.is_symlink():
        return None
    return path if path.is_file() else None


def file_response(path: StoragePath) -> Response:
    """The file as a response: streamed from disk, or read whole from S3."""
    if path.is_local:
        return FileResponse(path)
    return Response(path.read_bytes(), media_type=mimetypes.guess_type(path.name)[0] or "application/octet-stream")


def airflow_task_of(requested: str) -> str | None:
    """The UI path of the Airflow task whose run made the validation page `requested` (`validations/...html`):
    read from the stored validation result beside the Data Docs (the page itself may be rebuilt by GE)."""
    if not (requested.startswith("validations/") and requested.endswith(".html")):
        return None
    stored = safe_file(load_settings().layout.gx_project / "gx" / "validations",
                       requested.removeprefix("validations/").removesuffix(".html") + ".json")
    try:
        task = (json.loads(stored.read_text()).get("meta") or {}).get(AIRFLOW_TASK_META) if stored else None
    except (OSError, ValueError):
        return None
    return task if isinstance(task, str) and task.startswith("/dags/") else None


def with_backlink(page: str, task: str | None) -> str:
    """`page` with a bar at its top linking back to the Airflow task that validated (none without one)."""
    if not task:
        return page
    label = html.escape(unquote(task.removeprefix("/dags/")).replace("/runs/", " · run ").replace("/tasks/", " · "))
    bar = (f'<div class="lakehouse-airflow-link" style="padding:6px 14px;background:#eef3fb;font:14px sans-serif">'
           f'<a href="{html.escape(task)}" target="_top">&larr; Airflow: {label}</a></div>')
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + bar, page, count=1)


def folder_app(title: str, folder: Callable[[], StoragePath], missing: str) -> FastAPI:
    """The files of `folder()` (asked at each request), behind Airflow's login; a 404 says `missing`."""
    app = FastAPI(title=title, dependencies=[Depends(get_user)])

    @app.get("/{requested:path}")
    def serve(requested: str) -> Response:
        path = safe_file(folder(), requested)
        if path is None:
            raise HTTPException(status_code=404, detail=missing)
        return file_response(path)

    return app


def health_report_app() -> FastAPI:
    """The pipeline-health report (include/ops/health_report.py): its page and charts, behind Airflow's login."""
    return folder_app("Lakehouse pipeline health", lambda: load_settings().layout.health_report,
                      "not found (the health report is built by the backfill and live DAGs' health_report task)")


def docs_site_app() -> FastAPI:
    """The documentation site `make docs` builds (docs/, mkdocs.yml), behind Airflow's login."""
    return folder_app("Lakehouse documentation", lambda: LocalPath(DOCS_SITE),
                      "not found (the documentation is built by `make docs`, and by `make airflow` before it starts "
                      "Airflow)")


def data_docs_app() -> FastAPI:
    app = FastAPI(title="Lakehouse Data Docs", dependencies=[Depends(get_user)])  # Airflow's login, every route

    @app.get("/{requested:path}")
    def serve(requested: str) -> Response:
        if requested.startswith(data_docs_assets.ASSETS_ROUTE + "/"):
            asset = data_docs_assets.asset_file(requested.removeprefix(data_docs_assets.ASSETS_ROUTE + "/"))
            if asset is None:
                raise HTTPException(status_code=404, detail="no such asset")
            return FileResponse(asset)
        path = safe_file(load_settings().layout.data_docs, requested)  # read per request: LAKEHOUSE_ROOT may move
        if path is None:
            raise HTTPException(status_code=404, detail="not found")
        if path.suffix == ".html":
            page = data_docs_assets.offline_html(path.read_text(), URL_PREFIX)
            return Response(with_backlink(page, airflow_task_of(requested)), media_type="text/html")
        return file_response(path)

    return app


class LakehouseDataDocsPlugin(AirflowPlugin):
    name = "lakehouse_data_docs"
    fastapi_apps = [{"app": data_docs_app(), "url_prefix": URL_PREFIX, "name": "Lakehouse Data Docs"},
                    {"app": health_report_app(), "url_prefix": HEALTH_URL_PREFIX, "name": "Lakehouse pipeline health"},
                    {"app": docs_site_app(), "url_prefix": DOCS_URL_PREFIX, "name": "Lakehouse documentation"}]
    # No `url_route`: with one, the UI embeds the page and shows `/plugin/<route>` + the page's own path in the
    # address bar (`/plugin/lakehouse-data-docs/lakehouse-data-docs/index.html`); the reports open as themselves.
    external_views = [
        {"name": "Data quality reports", "href": INDEX, "destination": "nav", "category": "browse"},
        {"name": "Pipeline health report", "href": f"{HEALTH_URL_PREFIX}/index.html", "destination": "nav",
         "category": "browse"},
        {"name": "Lakehouse documentation", "href": f"{DOCS_URL_PREFIX}/index.html", "destination": "nav",
         "category": "browse"},
    ]
