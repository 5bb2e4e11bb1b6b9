"""Stop requests: a file asking a running job to stop at its next batch boundary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from include.settings import Settings
from include.storage.files import write_json_atomically


def request_stop(settings: Settings, job_id: str, reason: str) -> Path:
    """Ask the running job to stop at its next batch boundary."""
    path = settings.layout.stop_request(job_id)
    write_json_atomically(path, {"job": job_id, "reason": reason, "requested_at": datetime.now(UTC).isoformat()})
    return path


def pending(settings: Settings, job_id: str) -> str | None:
    """The text of the job's stop request, or None when there is none."""
    try:
        return settings.layout.stop_request(job_id).read_text()
    except FileNotFoundError:
        return None


def clear(settings: Settings, job_id: str) -> None:
    settings.layout.stop_request(job_id).unlink(missing_ok=True)
