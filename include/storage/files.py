"""Small file helpers shared by the operational state files (heartbeats, supervisor state)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse


def write_json_atomically(path: Path, payload: dict) -> None:
    """Replace `path` with `payload` as JSON; readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(payload, default=str))
    tmp.replace(path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def local_path(uri: str) -> str:
    """The local path of a `file:` URI as Spark writes them (`file:/a`, `file:///a`, percent-encoded)."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri
