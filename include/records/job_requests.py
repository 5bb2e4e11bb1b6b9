"""Requests to a running driver, as files it polls: stop a job at its next batch boundary, or (to a group's driver)
start a job of the group that is not running."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from include.settings import Settings
from include.storage.files import write_json_atomically
from include.storage.paths import StoragePath

KINDS = ("stop", "start")


def request(settings: Settings, job_id: str, reason: str, kind: str = "stop") -> StoragePath:
    """Ask the driver running (or, for `start`, hosting) the job to stop or start it."""
    path = settings.layout.job_request(kind, job_id)
    write_json_atomically(path, {"job": job_id, "reason": reason, "requested_at": datetime.now(UTC).isoformat()})
    return path


def request_stop(settings: Settings, job_id: str, reason: str) -> StoragePath:
    """Ask the running job to stop at its next batch boundary."""
    return request(settings, job_id, reason, "stop")


def pending(settings: Settings, job_id: str, kind: str = "stop") -> str | None:
    """The text of the job's request of that kind, or None when there is none."""
    try:
        return settings.layout.job_request(kind, job_id).read_text()
    except FileNotFoundError:
        return None


def discard_older(settings: Settings, job_id: str, than: datetime, kind: str = "stop") -> str | None:
    """Remove the job's request of that kind when it was made before `than` (left by a run that ended without
    reading it); one made since is kept for this run. The text of the request discarded, or None."""
    text = pending(settings, job_id, kind)
    if text is None:
        return None
    try:
        made = datetime.fromisoformat(json.loads(text)["requested_at"])
    except (ValueError, KeyError, TypeError):
        made = None  # unreadable: not one this run can have been sent
    if made is not None and made >= than:
        return None
    clear(settings, job_id, kind)
    return text


def clear(settings: Settings, job_id: str, kind: str = "stop") -> None:
    settings.layout.job_request(kind, job_id).unlink(missing_ok=True)
