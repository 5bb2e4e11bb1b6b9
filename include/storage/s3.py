"""The S3 side of storage: where the store is and how to reach it (one :class:`S3Config` from the settings), and a
client per process.

boto3 rather than obstore or pyarrow.fs: pyarrow.fs has no conditional put; obstore has (its put modes) but its
Rust runtime hangs in a forked child (measured here: any call after `os.fork()`, even on a new store), and Airflow's
task runner and Spark's Python daemon fork. boto3 gives S3's conditional writes as they are (`IfNoneMatch="*"`,
`IfMatch=<ETag>`, also on DeleteObject) and a client made in the child works.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

SCHEMES = ("s3", "s3a")
SPARK_SCHEME = "s3a"  # Spark reads and writes through Hadoop's S3A; delta-rs reads s3a:// too
DEFAULT_ENDPOINT = "http://127.0.0.1:8333"
DEFAULT_REGION = "us-east-1"
ENV_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
CREDENTIALS_FILE = "credentials.json"  # in the S3 server's home (Layout.s3_server): those `storage up` made


@dataclass(frozen=True)
class S3Config:
    """How to reach the object store (LAKEHOUSE_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_REGION). An empty endpoint means AWS itself (virtual-hosted addressing, HTTPS)."""

    endpoint: str = ""
    access_key_id: str = ""
    secret_access_key: str = ""
    region: str = DEFAULT_REGION

    @property
    def path_style(self) -> bool:
        return bool(self.endpoint)

    def delta_options(self) -> dict[str, str]:
        """delta-rs's storage options (object_store's keys)."""
        options = {"AWS_REGION": self.region}
        if self.endpoint:
            options |= {"AWS_ENDPOINT_URL": self.endpoint, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
                        "AWS_ALLOW_HTTP": str(self.endpoint.startswith("http://")).lower()}
        if self.access_key_id:
            options |= {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key}
        return options

    def hadoop_options(self) -> dict[str, str]:
        """Hadoop S3A's options, as `spark.hadoop.*` confs without the prefix. No secret among them (confs can end up
        on a command line): S3A reads the credentials from the environment (:meth:`environment`)."""
        options = {"fs.s3a.endpoint.region": self.region, "fs.s3a.path.style.access": str(self.path_style).lower()}
        if self.endpoint:
            options |= {"fs.s3a.endpoint": self.endpoint,
                        "fs.s3a.connection.ssl.enabled": str(self.endpoint.startswith("https://")).lower()}
        if self.access_key_id:
            options["fs.s3a.aws.credentials.provider"] = ENV_CREDENTIALS_PROVIDER
        return options

    def environment(self) -> dict[str, str]:
        """The credentials as AWS's environment variables (what S3A's provider and every AWS client read)."""
        if not self.access_key_id:
            return {}
        return {"AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
                "AWS_REGION": self.region}


def split_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix without slashes at either end) of `s3://bucket/prefix` or `s3a://...`; ValueError naming
    what is wrong otherwise."""
    parsed = urlparse(uri)
    if parsed.scheme not in SCHEMES:
        raise ValueError(f"{uri!r} is not an S3 URI (s3://bucket/prefix or s3a://bucket/prefix)")
    bucket = parsed.netloc
    if len(bucket) < 3 or not all(c.islower() or c.isdigit() or c in ".-" for c in bucket):
        raise ValueError(f"{uri!r}: {bucket!r} is not a valid bucket name (3-63 lower-case letters, digits, '.', '-')")
    if parsed.query or parsed.fragment:
        raise ValueError(f"{uri!r}: an S3 URI takes no query or fragment")
    return bucket, parsed.path.strip("/")


def kept_credentials(server_home: Path) -> tuple[str, str] | None:
    """The credentials `lakehouse storage up` made for a server started without AWS_ACCESS_KEY_ID, or None."""
    try:
        kept = json.loads((server_home / CREDENTIALS_FILE).read_text())
        return kept["access_key_id"], kept["secret_access_key"]
    except (FileNotFoundError, KeyError, ValueError):
        return None


def bucket_problem(config: S3Config, bucket: str) -> str | None:
    """Why `bucket` cannot be used with `config` (one line), or None when it answers."""
    where = config.endpoint or "AWS"
    try:
        client(config).head_bucket(Bucket=bucket)
    except Exception as exc:
        status = (getattr(exc, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            return f"bucket {bucket} does not exist at {where} (`lakehouse storage up` creates it)"
        if status in (401, 403):
            return (f"{where} refused the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
                    + (", or those `lakehouse storage up` keeps" if config.endpoint else "") + ")")
        return f"no S3 server answers at {where} ({type(exc).__name__}; `lakehouse storage up` starts one)"
    return None


_clients: dict[tuple[int, S3Config], Any] = {}
_clients_lock = threading.Lock()


def client(config: S3Config):
    """A boto3 S3 client for `config`, one per process (a client made before a fork is not used after it)."""
    key = (os.getpid(), config)
    with _clients_lock:
        if key not in _clients:
            import boto3
            from botocore.config import Config

            _clients[key] = boto3.session.Session().client(
                "s3", endpoint_url=config.endpoint or None, region_name=config.region,
                aws_access_key_id=config.access_key_id or None,
                aws_secret_access_key=config.secret_access_key or None,
                config=Config(s3={"addressing_style": "path" if config.path_style else "virtual"},
                              retries={"max_attempts": 4, "mode": "standard"}, connect_timeout=5, read_timeout=20,
                              max_pool_connections=32))
        return _clients[key]
