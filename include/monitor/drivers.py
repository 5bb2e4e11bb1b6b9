"""The live drivers Prometheus scrapes: each running live driver that serves Spark's metrics (LAKEHOUSE_DRIVER_METRICS)
records where in its jobs' heartbeats; the metrics endpoint writes them, at each scrape, as the targets of
Prometheus' file-based discovery (`<local>/_monitor/targets/spark_drivers.json`), so a driver that starts is scraped
from the next interval on and one that stops is dropped (its UI port differs at each start)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from include.records import lease
from include.records.heartbeats import read_heartbeat
from include.registry import Registry
from include.settings import Settings


def driver_targets(settings: Settings, registry: Registry) -> list[dict]:
    """One target group per running live driver serving metrics: its address, labelled `lakehouse_driver` (its group,
    or its job alone). A heartbeat counts only while the process that wrote it holds the job's lease."""
    found: dict[str, str] = {}
    for job_id in registry.order:
        job = registry.jobs[job_id]
        beat = read_heartbeat(settings, job_id) if job.live else None
        if not beat or not beat.get("metrics_url"):
            continue
        owner = lease.holder(settings, job_id)
        if owner is not None and owner.pid == beat.get("pid"):
            found.setdefault(urlsplit(beat["metrics_url"]).netloc, job.group or job_id)
    return [{"targets": [address], "labels": {"lakehouse_driver": name}} for address, name in sorted(found.items())]


def write_targets(settings: Settings, registry: Registry, path: Path) -> None:
    """Replace the discovery file with the drivers running now, when they changed (Prometheus watches it)."""
    text = json.dumps(driver_targets(settings, registry), indent=1) + "\n"
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        pass
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".targets-")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(temporary, path)
