"""Rotation of the logs live drivers write: ``_ops/logs/<job or group>.log``, bounded in size and count.

A driver the supervisor launches writes its output (Python's lines, Spark's, the JVM's) to its log through the file
descriptors it inherited, in append mode. Such a file cannot be renamed away under its writer, so it is rotated by
copy and truncate: its content goes to ``<name>.log.1`` (older ones shift to ``.2`` ... up to
``LAKEHOUSE_LOG_BACKUPS``; the oldest is deleted) and the file is emptied in place; the writer's next line lands at
its start (append mode). A line written in the instant between the copy and the truncation can be lost.

Who rotates: the driver itself, from its queries' poll loops (:func:`check_own_log`, at most once a minute, for the
log named by ``LAKEHOUSE_LOG_FILE``, which the launch sets), and the launch, before it appends to a log. So a log
holds at most ``LAKEHOUSE_LOG_MAX_BYTES`` plus a minute of output, and its backups as much each.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path

from include.settings import Settings

log = logging.getLogger(__name__)

LOG_FILE_VARIABLE = "LAKEHOUSE_LOG_FILE"  # set by the launch: the log this process's output goes to
CHECK_SECONDS = 60.0

_lock = threading.Lock()  # a group driver's queries share one log
_checked_at = {"at": float("-inf")}


def backup(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


def rotate(path: Path, max_bytes: int, backups: int) -> bool:
    """When `path` holds more than `max_bytes`: shift its backups, copy it to ``.1`` and empty it in place. True when
    it rotated."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    backup(path, backups).unlink(missing_ok=True)
    for index in range(backups - 1, 0, -1):
        if backup(path, index).exists():
            os.replace(backup(path, index), backup(path, index + 1))
    with path.open("r+b") as current, backup(path, 1).open("wb") as first:
        shutil.copyfileobj(current, first)
        current.truncate(0)
    return True


def check_own_log(settings: Settings, now: float | None = None) -> bool:
    """Rotate this process's log (``LAKEHOUSE_LOG_FILE``) when it is over the limit; checked at most once a minute.
    True when it rotated."""
    name = os.environ.get(LOG_FILE_VARIABLE)
    now = time.monotonic() if now is None else now
    if not name or now - _checked_at["at"] < CHECK_SECONDS:
        return False
    with _lock:
        if now - _checked_at["at"] < CHECK_SECONDS:
            return False
        _checked_at["at"] = now
        try:
            rotated = rotate(Path(name), settings.log_max_bytes, settings.log_backups)
        except OSError as exc:  # a full disk or a removed directory must not stop the queries
            log.warning("could not rotate the log %s: %s", name, exc)
            return False
    if rotated:
        log.info("log %s rotated (over %d bytes; %d backups kept)", name, settings.log_max_bytes, settings.log_backups)
    return rotated
