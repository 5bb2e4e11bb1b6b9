"""Heartbeats: `_ops/heartbeats/<job>.json`, refreshed by a running job on every batch and idle tick."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from include.settings import Settings
from include.storage.files import read_json, write_json_atomically
from include.storage.paths import StoragePath


def write_heartbeat(settings: Settings, job_id: str, **fields) -> StoragePath:
    """Atomically refresh the job's heartbeat with `fields` (status, query_id, batch_id, ...)."""
    path = settings.layout.heartbeat(job_id)
    write_json_atomically(path, {"job": job_id, "pid": os.getpid(), "updated_at": datetime.now(UTC).isoformat(), **fields})
    return path


def read_heartbeat(settings: Settings, job_id: str) -> dict | None:
    return read_json(settings.layout.heartbeat(job_id))
