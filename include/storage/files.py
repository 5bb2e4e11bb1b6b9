"""Small JSON state files (heartbeats, supervisor state, requests, outcomes), on any storage path."""

from __future__ import annotations

import json
from pathlib import PurePath

from include.storage.paths import StoragePath, as_storage


def write_json_atomically(path: StoragePath | PurePath, payload: dict) -> None:
    """Replace `path` with `payload` as JSON; readers never see a partial file (a rename locally, a PUT on S3)."""
    as_storage(path).write_text(json.dumps(payload, default=str))


def read_json(path: StoragePath) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
