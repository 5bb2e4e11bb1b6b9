"""A storage path on S3: an object key, or a key prefix standing for a directory (include/storage/paths.py says what
every storage path offers). A move is a copy, then a marker naming what was copied (:data:`MOVED_MARKER`), then a
delete of the source: cut short, it is completed by calling it again.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from include.storage.protocol import StoragePath, VersionMismatch
from include.storage.s3 import SPARK_SCHEME, S3Config, client, split_uri

MOVED_MARKER = "_lakehouse_moved.json"  # written last by an S3 move: the copy is whole, the source may go


@dataclass(frozen=True)
class ObjectStat:
    st_size: int
    st_mtime: float


class S3Path:
    """An object key (or key prefix: a "directory") in a bucket."""

    __slots__ = ("config", "bucket", "key", "_kind")

    def __init__(self, config: S3Config, bucket: str, key: str = "", kind: str | None = None) -> None:
        self.config = config
        self.bucket = bucket
        self.key = str(PurePosixPath(key.strip("/"))) if key.strip("/") else ""
        self._kind = kind  # "dir" or "file" when a listing said so: no request to ask again

    @classmethod
    def from_uri(cls, uri: str, config: S3Config) -> S3Path:
        bucket, key = split_uri(uri)
        return cls(config, bucket, key)

    # -- naming
    @property
    def uri(self) -> str:
        return f"{SPARK_SCHEME}://{self.bucket}/{self.key}".rstrip("/")

    @property
    def is_local(self) -> bool:
        return False

    def as_uri(self) -> str:
        return self.uri

    def delta_options(self) -> dict[str, str]:
        return self.config.delta_options()

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"S3Path({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, S3Path) and (self.bucket, self.key, self.config) == (other.bucket, other.key,
                                                                                      other.config)

    def __hash__(self) -> int:
        return hash((self.bucket, self.key))

    def __lt__(self, other: S3Path) -> bool:
        return (self.bucket, self.key) < (other.bucket, other.key)

    def __truediv__(self, other: str | PurePosixPath) -> S3Path:
        return S3Path(self.config, self.bucket, f"{self.key}/{other}" if self.key else str(other))

    def joinpath(self, *others: str) -> S3Path:
        path = self
        for other in others:
            path = path / other
        return path

    @property
    def _pure(self) -> PurePosixPath:
        return PurePosixPath("/", self.key)

    @property
    def name(self) -> str:
        return self._pure.name

    @property
    def stem(self) -> str:
        return self._pure.stem

    @property
    def suffix(self) -> str:
        return self._pure.suffix

    @property
    def parts(self) -> tuple[str, ...]:
        return self._pure.parts[1:]

    @property
    def parent(self) -> S3Path:
        return S3Path(self.config, self.bucket, str(self._pure.parent).lstrip("/"))

    @property
    def parents(self) -> list[S3Path]:
        found, path = [], self
        while path.key:
            path = path.parent
            found.append(path)
        return found

    def with_name(self, name: str) -> S3Path:
        return S3Path(self.config, self.bucket, str(self._pure.with_name(name)).lstrip("/"))

    def with_suffix(self, suffix: str) -> S3Path:
        return S3Path(self.config, self.bucket, str(self._pure.with_suffix(suffix)).lstrip("/"))

    def relative_to(self, other: S3Path) -> PurePosixPath:
        return self._pure.relative_to(other._pure)

    # -- reading
    @property
    def _client(self):
        return client(self.config)

    @property
    def _prefix(self) -> str:
        return f"{self.key}/" if self.key else ""

    def _head(self) -> dict | None:
        if not self.key:
            return None
        try:
            return self._client.head_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise

    def is_file(self) -> bool:
        if self._kind is not None:
            return self._kind == "file"
        return self._head() is not None

    def is_dir(self) -> bool:
        if self._kind is not None:
            return self._kind == "dir"
        listed = self._client.list_objects_v2(Bucket=self.bucket, Prefix=self._prefix, MaxKeys=1)
        return listed.get("KeyCount", 0) > 0

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def stat(self) -> ObjectStat:
        head = self._head()
        if head is None:
            raise FileNotFoundError(self.uri)
        return ObjectStat(int(head["ContentLength"]), head["LastModified"].timestamp())

    def _list(self, delimiter: bool) -> Iterator[dict]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._prefix, **({"Delimiter": "/"} if delimiter else {}))
        yield from pages

    def iterdir(self) -> Iterator[S3Path]:
        for page in self._list(delimiter=True):
            for common in page.get("CommonPrefixes", []):
                yield S3Path(self.config, self.bucket, common["Prefix"], "dir")
            for item in page.get("Contents", []):
                if item["Key"] != self._prefix:  # a "directory" placeholder some tools write
                    yield S3Path(self.config, self.bucket, item["Key"], "file")

    def _keys(self) -> Iterator[dict]:
        """Every object under this prefix as listed (directory markers, `<prefix>/`, included)."""
        for page in self._list(delimiter=False):
            yield from page.get("Contents", [])

    def listing(self) -> Iterator[tuple[str, str]]:
        """Every object under this prefix: (its key relative to the prefix, its ETag without quotes)."""
        for item in self._keys():
            if not item["Key"].endswith("/"):
                yield item["Key"][len(self._prefix):], item["ETag"].strip('"')

    def objects(self) -> Iterator[tuple[S3Path, int, datetime]]:
        """Every object under this prefix: (path, size, last modified); directory markers left out."""
        for item in self._keys():
            if not item["Key"].endswith("/"):
                yield S3Path(self.config, self.bucket, item["Key"], "file"), int(item["Size"]), item["LastModified"]

    def rglob_files(self) -> Iterator[tuple[S3Path, int]]:
        for path, size, _ in self.objects():
            yield path, size

    def glob(self, pattern: str) -> Iterator[S3Path]:
        """Children whose name matches `pattern`, or with `**/<pattern>` every object below whose name does."""
        if pattern.startswith("**/"):
            yield from self.rglob(pattern[3:])
        elif "/" in pattern or "**" in pattern:
            raise NotImplementedError(f"glob pattern {pattern!r} on S3 (one level, or **/<name pattern>)")
        else:
            yield from (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def rglob(self, pattern: str) -> Iterator[S3Path]:
        """Objects below whose name matches `pattern` (objects only: a prefix is no object)."""
        yield from (p for p, _, _ in self.objects() if fnmatch.fnmatchcase(p.name, pattern))

    def read_versioned(self) -> tuple[bytes, str]:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if _status(exc) == 404:
                raise FileNotFoundError(self.uri) from None
            raise
        return response["Body"].read(), response["ETag"]

    def read_bytes(self) -> bytes:
        return self.read_versioned()[0]

    def read_chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self.key)["Body"]
        except Exception as exc:
            if _status(exc) == 404:
                raise FileNotFoundError(self.uri) from None
            raise
        yield from body.iter_chunks(size)

    def upload_from(self, source: Path) -> None:
        self._client.upload_file(str(source), self.bucket, self.key)

    def read_text(self, encoding: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8")

    # -- writing
    def write_bytes(self, data: bytes) -> int:
        self._client.put_object(Bucket=self.bucket, Key=self.key, Body=data)
        return len(data)

    def write_text(self, text: str, encoding: str | None = None) -> int:
        self.write_bytes(text.encode(encoding or "utf-8"))
        return len(text)

    def create_exclusive(self, data: bytes) -> str:
        try:
            return self._client.put_object(Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*")["ETag"]
        except Exception as exc:
            if _status(exc) in (409, 412):
                raise FileExistsError(self.uri) from None
            raise

    def replace_if(self, data: bytes, version: str) -> str:
        try:
            return self._client.put_object(Bucket=self.bucket, Key=self.key, Body=data, IfMatch=version)["ETag"]
        except Exception as exc:
            if _status(exc) in (404, 409, 412):
                raise VersionMismatch(f"{self.uri} changed or is gone") from None
            raise

    def delete_if(self, version: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=version)
        except Exception as exc:
            if _status(exc) in (404, 409, 412):
                raise VersionMismatch(f"{self.uri} changed or is gone") from None
            raise

    def unlink(self, missing_ok: bool = False) -> None:
        if not missing_ok and not self.is_file():
            raise FileNotFoundError(self.uri)
        self._client.delete_object(Bucket=self.bucket, Key=self.key)

    def mkdir(self, mode: int = 0o777, parents: bool = False, exist_ok: bool = False) -> None:
        """A directory marker (an empty `<prefix>/` object, as Hadoop's S3A makes them): the prefix exists before
        its first object (Spark's file source refuses a landing directory that does not)."""
        if self.key:
            self._client.put_object(Bucket=self.bucket, Key=self._prefix, Body=b"")

    def touch(self) -> None:
        if not self.is_file():
            self.write_bytes(b"")

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start:start + 1000]
            self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in chunk],
                                                                    "Quiet": True})

    def rmtree(self) -> None:
        """Delete every object under this prefix, then its directories, deepest first (nothing when there is none).

        A store with a file system behind its S3 API (SeaweedFS) keeps a directory that lost its last object: it
        stays in listings by delimiter, where Hadoop's S3A sees it (Spark refuses a new checkpoint whose `state/`
        lists such directories), until `<directory>/` itself is deleted. On AWS S3 those deletes do nothing."""
        keys = [item["Key"] for item in self._keys()]
        self._delete_keys(keys)
        directories = {f"{'/'.join(key.split('/')[:depth])}/" for key in keys
                       for depth in range(len(self._prefix.split("/")) - 1, len(key.rstrip("/").split("/")))}
        for depth in sorted({d.count("/") for d in directories}, reverse=True):
            self._delete_keys(sorted(d for d in directories if d.count("/") == depth))

    def copytree(self, target: StoragePath) -> None:
        """Copy every object under this prefix to the same place under `target` (server-side)."""
        destination = _s3(target)
        for item in self._keys():
            relative = item["Key"][len(self._prefix):]
            if relative == MOVED_MARKER:
                continue
            if item["Key"].endswith("/"):  # a directory marker: some stores cannot copy one, it has no content
                self._client.put_object(Bucket=destination.bucket, Key=f"{destination._prefix}{relative}", Body=b"")
                continue
            self._client.copy_object(Bucket=destination.bucket, Key=f"{destination._prefix}{relative}",
                                     CopySource={"Bucket": self.bucket, "Key": item["Key"]})

    def move_to(self, target: StoragePath) -> None:
        """Copy to `target`, mark the copy whole, delete the source; called again after a crash, it finishes."""
        destination = _s3(target)
        marker = destination / MOVED_MARKER
        if not marker.is_file():
            self.copytree(destination)
            marker.write_text(json.dumps({"from": self.uri}))
        self.rmtree()


def _s3(path: StoragePath) -> S3Path:
    if not isinstance(path, S3Path):
        raise ValueError(f"{path} is not on S3")
    return path


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status is None and response.get("Error", {}).get("Code") in ("NoSuchKey", "NotFound", "404"):
        return 404
    return status
