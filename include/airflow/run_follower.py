"""Following a DAG run from outside Airflow (`lakehouse demo`): one line per task as it starts, finishes, fails or is
skipped, read from Airflow's metadata database while the run goes on; and the run's assets made active first.

Import only in a process whose environment is Airflow's (include.airflow.environment): the ORM reads its
configuration when first imported.
"""

from __future__ import annotations

import logging
import subprocess
import time
import urllib.request
from typing import TextIO

from include.settings import Settings

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0


def latest_run_id(dag_id: str) -> int:
    """The highest DagRun id of `dag_id` so far (0 when none): runs created later have higher ids."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.max(DagRun.id)).where(DagRun.dag_id == dag_id)) or 0


def ui_run_url(dag_id: str, run_id: str) -> str | None:
    """The run's page in the Airflow UI when an API server answers at `[api] base_url`, else None."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/")
    try:
        with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2):
            pass
    except OSError:
        return None
    return f"{base}/dags/{dag_id}/runs/{run_id}"


def follow(dag_id: str, after_run: int, process: subprocess.Popen, out: TextIO) -> None:
    """Until `process` ends, write a line for each state change of the tasks of `dag_id`'s first run with an
    id above `after_run`, with durations; then the changes not yet written."""
    seen: dict[str, tuple[str | None, int]] = {}
    announced = False
    while True:
        running = process.poll() is None
        try:
            run_id, tasks = _snapshot(dag_id, after_run)
        except Exception as exc:  # e.g. SQLite busy while the run writes: try again at the next poll
            log.debug("could not read the run's tasks: %s", exc)
            run_id, tasks = None, []
        if run_id and not announced:
            url = ui_run_url(dag_id, run_id)
            out.write(f"  run {run_id}" + (f": {url}" if url else "") + "\n")
            announced = True
        for task_id, state, try_number, seconds in tasks:
            if seen.get(task_id) == (state, try_number):
                continue
            if state in ("success", "failed", "up_for_retry") and seen.get(task_id, (None,))[0] != "running":
                out.write(_describe(task_id, "running", try_number, None) + "\n")  # it ran between two polls
            seen[task_id] = (state, try_number)
            line = _describe(task_id, state, try_number, seconds)
            if line:
                out.write(line + "\n")
                out.flush()
        if not running:
            return
        time.sleep(POLL_SECONDS)


def _snapshot(dag_id: str, after_run: int) -> tuple[str | None, list[tuple[str, str | None, int, float | None]]]:
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.id > after_run)
                              .order_by(DagRun.id)).first()
        if run is None:
            return None, []
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id,
                                                         TaskInstance.run_id == run.run_id)).all()
        rows = [(ti.task_id, ti.state and str(ti.state), ti.try_number or 0,
                 (ti.end_date - ti.start_date).total_seconds() if ti.start_date and ti.end_date else None)
                for ti in sorted(tis, key=lambda t: (t.start_date is None, t.start_date or 0, t.task_id))]
        return run.run_id, rows


def _describe(task_id: str, state: str | None, try_number: int, seconds: float | None) -> str | None:
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    return {
        "running": f"  started  {task_id}" + (f" (try {try_number})" if try_number > 1 else ""),
        "success": f"  finished {task_id}{took}",
        "failed": f"  FAILED   {task_id}{took}: see its log in the Airflow UI or the demo log",
        "up_for_retry": f"  retry    {task_id}: try {try_number} failed{took}, Airflow tries again",
        "skipped": f"  skipped  {task_id}",
        "upstream_failed": f"  not run  {task_id}: an upstream task failed",
    }.get(state or "")


def forget_other_roots(settings: Settings, tables: list[str]) -> int:
    """Deactivate the Assets of `tables` active at another root (an earlier demo's, a moved lakehouse's) in Airflow's
    metadata DB, as a running scheduler does for assets no DAG names any more: Airflow activates an asset only when no
    active one has its name, and a task whose outlets are inactive fails. `airflow dags test` runs no scheduler.
    Returns how many it deactivated."""
    from airflow.models.asset import AssetActive
    from airflow.utils.session import create_session
    from sqlalchemy import delete, or_

    from include.airflow.assets import table_asset

    ours = [table_asset(settings, t) for t in tables]
    stale = or_(*((AssetActive.name == a.name) & (AssetActive.uri != a.uri) for a in ours))
    with create_session() as session:
        return session.execute(delete(AssetActive).where(stale)).rowcount if ours else 0
