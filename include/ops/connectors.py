"""The live supervision of the CDC connectors, beside the jobs' (include/ops/supervisor.py): a connector whose task,
or itself, FAILED is restarted through the Connect worker's REST API (`POST /connectors/<name>/restart?
includeTasks=true&onlyFailed=true`), and each restart is a row in `_ops/alerts` (job: the connector's name). A worker
that does not answer is an alert too: nothing captures the database's changes meanwhile, and its slot holds WAL.
"""

from __future__ import annotations

import logging

from include.cdc import connect, connectors
from include.cdc.database import CdcError
from include.records.alerts import record_alert
from include.registry import Registry
from include.settings import Settings

log = logging.getLogger(__name__)


def databases_read(registry: Registry, jobs: list[str]) -> list[str]:
    """The logical databases whose `cdc:` sources `jobs` read (their connectors)."""
    return sorted({s.cdc.database for job in jobs for s in registry.jobs[job].sources if s.cdc is not None})


def supervise_connectors(settings: Settings, databases: list[str], *, dag_id: str = "", task_id: str = "",
                         run_id: str = "") -> dict[str, str]:
    """Per connector of `databases`: `running`, `restarted` (it or a task had FAILED), `worker_down`,
    `not_registered`, or its state in lower case (`paused`, `stopped`, `unassigned`); a line each in the log."""
    actions: dict[str, str] = {}
    names = [connectors.connector_name(d) for d in databases]
    if names and not connect.answers(settings.connect_url):
        for name in names:
            actions[name] = "worker_down"
            record_alert(settings, name, f"the Kafka Connect worker does not answer at {settings.connect_url}: the "
                         "database's changes are not captured and its slot holds WAL (`lakehouse cdc up`)",
                         dag_id=dag_id, task_id=task_id, run_id=run_id)
        return actions
    for name in names:
        try:
            state = connectors.connector_status(settings.connect_url, name)
            if state is None:
                actions[name] = "not_registered"
            elif connectors.failed(state):
                connectors.restart_failed(settings.connect_url, name)
                actions[name] = "restarted"
                record_alert(settings, name, f"connector {name}: {_what_failed(state)} FAILED ("
                             f"{state['trace'] or 'no trace'}): restarted through Connect's REST API",
                             dag_id=dag_id, task_id=task_id, run_id=run_id, severity="warning")
            else:
                actions[name] = (state["state"] or "unassigned").lower()
        except CdcError as exc:  # the worker went away between two calls
            actions[name] = "worker_down"
            log.warning("%s", exc)
        log.info("%s: %s", name, actions[name])
    return actions


def _what_failed(state: dict) -> str:
    tasks = [f"task {n}" for n, s in enumerate(state["tasks"]) if s == "FAILED"]
    return ", ".join((["the connector"] if state["state"] == "FAILED" else []) + tasks)
