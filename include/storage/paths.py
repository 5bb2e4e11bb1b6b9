"""One storage interface for everything under LAKEHOUSE_ROOT, on a local disk or on S3.

A path is a :class:`LocalPath` (a `pathlib` path: local code keeps working as it is) or an :class:`S3Path` (an
object key in a bucket), and both offer the same operations (the :class:`StoragePath` protocol):

- navigation: ``/``, ``name``, ``stem``, ``suffix``, ``parent``, ``with_name``; ``uri`` (what Spark and delta-rs open);
- reading: ``exists``, ``is_file``, ``is_dir``, ``iterdir``, ``glob``, ``rglob``, ``stat``, ``read_bytes``,
  ``read_text``, ``read_versioned`` (the content and its version: an S3 ETag, a local content hash);
- writing: ``write_bytes`` / ``write_text`` (whole: a reader sees the old content or the new, never part of one),
  ``create_exclusive`` (only if absent: FileExistsError otherwise), ``replace_if`` / ``delete_if`` (compare-and-swap
  on a version: :class:`VersionMismatch` when it changed), ``unlink``, ``mkdir`` (nothing on S3), ``rmtree``,
  ``copytree``, ``move_to``.

A version says which content a writer read: two writes of the same bytes have the same version, so whoever relies
on compare-and-swap writes bodies that differ (a lease's holds its expiry and a nonce).
On S3 a directory is a key prefix: it exists while an object lies under it. `move_to` is a copy, then a marker
naming what was copied, then a delete of the source: cut short, it is completed by calling it again.

Everything is imported from here; :class:`LocalPath` lives here, :class:`S3Path` in s3_path.py, the protocol and
:class:`VersionMismatch` in protocol.py (below both).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path, PosixPath
from urllib.parse import unquote, urlparse

from include.storage.protocol import StoragePath, VersionMismatch, content_version
from include.storage.s3 import S3Config
from include.storage.s3_path import MOVED_MARKER, ObjectStat, S3Path

__all__ = ["MOVED_MARKER", "LocalPath", "ObjectStat", "S3Path", "StoragePath", "VersionMismatch", "as_storage",
           "content_version", "storage_path"]


class LocalPath(PosixPath):
    """A local path with the storage operations; everything else is pathlib's."""

    @property
    def uri(self) -> str:
        return str(self)

    @property
    def is_local(self) -> bool:
        return True

    def delta_options(self) -> dict[str, str]:
        return {}

    def write_bytes(self, data: bytes) -> int:  # type: ignore[override]
        """Replace the file whole (a temporary file renamed over it)."""
        self.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.with_name(f".{self.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, self)
        return len(data)

    def write_text(self, data: str, encoding: str | None = None, errors: str | None = None,  # type: ignore[override]
                   newline: str | None = None) -> int:
        self.write_bytes(data.encode(encoding or "utf-8", errors or "strict"))
        return len(data)

    def read_versioned(self) -> tuple[bytes, str]:
        data = self.read_bytes()
        return data, content_version(data)

    def create_exclusive(self, data: bytes) -> str:
        """Write the file only if there is none (FileExistsError otherwise); readers never see part of it."""
        self.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.with_name(f".{self.name}.{os.getpid()}.{threading.get_ident()}.new")
        with open(tmp, "wb") as handle:
            handle.write(data)
        try:
            os.link(tmp, self)  # atomic, and fails when the name exists
        finally:
            os.unlink(tmp)
        return content_version(data)

    @contextlib.contextmanager
    def _unchanged_since(self, version: str) -> Iterator[None]:
        """Hold the file's directory locked while the file still has ``version`` (else VersionMismatch).

        Compare-and-swap steps of every process serialize on that lock.
        """
        fd = os.open(self.parent, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            try:
                current = content_version(self.read_bytes())
            except FileNotFoundError:
                raise VersionMismatch(f"{self} is gone") from None
            if current != version:
                raise VersionMismatch(f"{self} changed")
            yield
        finally:
            os.close(fd)

    def replace_if(self, data: bytes, version: str) -> str:
        with self._unchanged_since(version):
            self.write_bytes(data)
        return content_version(data)

    def delete_if(self, version: str) -> None:
        with self._unchanged_since(version):
            self.unlink()

    def rmtree(self) -> None:
        shutil.rmtree(self, ignore_errors=True)

    def copytree(self, target: StoragePath) -> None:
        shutil.copytree(self, _local(target), dirs_exist_ok=True)

    def move_to(self, target: StoragePath) -> None:
        self.rename(_local(target))

    def read_chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """The file's bytes, `size` at a time (bounded memory)."""
        with open(self, "rb") as handle:
            while block := handle.read(size):
                yield block

    def upload_from(self, source: Path) -> None:
        """Put the local file `source` here, whole."""
        self.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, self)

    def rglob_files(self) -> Iterator[tuple[LocalPath, int]]:
        """Every file under this directory, with its size."""
        for path in self.rglob("*"):
            if path.is_file():
                yield path, path.stat().st_size


def _local(path: StoragePath) -> Path:
    if not path.is_local:
        raise ValueError(f"{path} is not on the local disk")
    return Path(str(path))


def as_storage(path: StoragePath | os.PathLike) -> LocalPath | S3Path:
    """A storage path as it is, a plain local path (pathlib's, a string) as a :class:`LocalPath`."""
    return path if isinstance(path, LocalPath | S3Path) else LocalPath(os.fspath(path))


def storage_path(location: str | os.PathLike, s3: S3Config) -> LocalPath | S3Path:
    """The storage path of `location`: an `s3://` / `s3a://` URI, a `file:` URI, or a local path (made absolute)."""
    if isinstance(location, (LocalPath, S3Path)):
        return location
    text = str(location)
    scheme = text.split("://", 1)[0] if "://" in text else ""
    if scheme in ("s3", "s3a"):
        return S3Path.from_uri(text, s3)
    if scheme and scheme != "file" or text.startswith("file:") and not text.startswith(("file:/", "file:///")):
        raise ValueError(f"{text!r}: storage is a local path or an S3 URI (s3://bucket/prefix)")
    if text.startswith("file:"):
        text = unquote(urlparse(text).path)
    return LocalPath(os.path.abspath(os.path.expanduser(text)))
