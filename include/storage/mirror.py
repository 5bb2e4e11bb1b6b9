"""A local working copy of a folder that lives on S3 (the Great Expectations project and its Data Docs: GE writes
to a local directory): pulled before the work, pushed after it. Only what differs moves: an object's ETag is the MD5
of its content (a single-part PUT's), compared with the local file's."""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from include.storage.paths import S3Path

log = logging.getLogger(__name__)
PARALLEL = 8


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _local_files(directory: Path) -> dict[str, Path]:
    return {p.relative_to(directory).as_posix(): p for p in directory.rglob("*") if p.is_file()} \
        if directory.is_dir() else {}


def pull(source: S3Path, target: Path) -> int:
    """Make `target` hold what `source` holds (changed files fetched, files gone removed); files fetched."""
    remote = {key: etag for key, etag in source.listing()}
    local = _local_files(target)
    fetch = [key for key, etag in remote.items() if key not in local or _md5(local[key]) != etag]

    def get(key: str) -> None:
        destination = target / key
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes((source / key).read_bytes())

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(get, fetch))
    for key in set(local) - set(remote):
        local[key].unlink()
    log.debug("pulled %d of %d files from %s", len(fetch), len(remote), source)
    return len(fetch)


def push(source: Path, target: S3Path) -> int:
    """Make `target` hold what `source` holds (changed files put, files gone deleted); files put."""
    remote = {key: etag for key, etag in target.listing()}
    local = _local_files(source)
    send = [key for key, path in local.items() if remote.get(key) != _md5(path)]

    def put(key: str) -> None:
        (target / key).write_bytes(local[key].read_bytes())

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(put, send))
    for key in set(remote) - set(local):
        (target / key).unlink(missing_ok=True)
    log.debug("pushed %d of %d files to %s", len(send), len(local), target)
    return len(send)
