"""Small JSON state files (heartbeats, supervisor state, requests, outcomes), on any storage path; secrets kept in a
local one."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath

from include.storage.paths import StoragePath, as_storage


def write_json_atomically(path: StoragePath | PurePath, payload: dict) -> None:
    """Replace `path` with `payload` as JSON; readers never see a partial file (a rename locally, a PUT on S3)."""
    as_storage(path).write_text(json.dumps(payload, default=str))


def read_json(path: StoragePath) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def kept_secrets(path: Path, makers: Mapping[str, Callable[[], str]]) -> dict[str, str]:
    """The secrets kept in the local JSON file `path`, each of `makers` made once: the ones it lacks made and the
    file written again (whole, readable by this user only), the ones it holds kept."""
    kept = json.loads(path.read_text()) if path.exists() else {}
    if set(makers) <= set(kept):
        return kept
    made = {**{key: make() for key, make in makers.items()}, **kept}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(made, indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)
    return made
