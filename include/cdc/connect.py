"""The Kafka Connect worker that runs Debezium's connectors: one worker in distributed mode, started in the background
like the broker (`lakehouse cdc up`), its REST API on `LAKEHOUSE_CONNECT_URL` (loopback by default), its files under
`<local>/_cdc/connect/` (worker.properties, connect.log, connect.pid), stopped with SIGTERM (`lakehouse cdc down`).

Distributed mode keeps the connectors' configurations, source offsets and statuses in three compacted topics on the
product's broker (`lakehouse-connect-configs`, `-offsets`, `-status`, replication factor 1, created by the worker):
a worker started again, or another one in the same group, takes up where the last left off. Its jars
(`LAKEHOUSE_CONNECT_JARS_DIR`, include/jars/kafka-connect.pom.xml) are on the class path and found there
(`plugin.discovery=service_load`; `plugin.path` names an empty directory: Connect refuses an empty value). JSON
converters without schemas: a message's key and value are the plain JSON of Debezium's key and envelope. Offsets
are flushed every second: a worker killed replays at most that much, which the sinks' idempotency absorbs.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from include.addresses import http_host_port
from include.cdc.database import CdcError
from include.daemons import DaemonFiles, get_json, java, port_taken
from include.kafka import broker
from include.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 60.0
WORKER_HEAP = "-Xms128m -Xmx512m"
WORKER_JIT = "-XX:TieredStopAtLevel=1"  # C1 alone, as the broker: a development worker starts on less CPU
LOG_CONFIG = Path(__file__).with_name("connect_log4j2.properties")
GROUP = "lakehouse-connect"
INTERNAL_TOPICS = {"config": "lakehouse-connect-configs", "offset": "lakehouse-connect-offsets",
                   "status": "lakehouse-connect-status"}
MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"


@dataclass(frozen=True)
class WorkerFiles(DaemonFiles, daemon="the Kafka Connect worker", log="connect.log", pid="connect.pid"):
    """Where `lakehouse cdc up` keeps the worker's files (`<local>/_cdc/connect`)."""

    @property
    def properties(self) -> Path:
        return self.home / "worker.properties"

    @property
    def plugins(self) -> Path:
        """`plugin.path`: an empty directory (the plugins are on the class path)."""
        return self.home / "plugins"


def worker_files(settings: Settings) -> WorkerFiles:
    return WorkerFiles(settings.layout.cdc / "connect")


def worker_properties(files: WorkerFiles, bootstrap: str, url: str) -> str:
    """Distributed mode on `bootstrap`, REST on `url`'s host and port."""
    host, port = http_host_port("LAKEHOUSE_CONNECT_URL", url)
    lines = [f"bootstrap.servers={bootstrap}", f"group.id={GROUP}",
             f"listeners=http://{host}:{port}", f"rest.advertised.host.name={host}", f"rest.advertised.port={port}"]
    for kind, topic in INTERNAL_TOPICS.items():  # compacted (Connect creates them so), one replica on one broker
        lines += [f"{kind}.storage.topic={topic}", f"{kind}.storage.replication.factor=1"]
    lines += ["offset.storage.partitions=1", "status.storage.partitions=1",
              "key.converter=org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable=false",
              "value.converter=org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable=false",
              "offset.flush.interval.ms=1000",  # a crash replays at most a second of changes
              f"plugin.path={files.plugins}", "plugin.discovery=service_load",
              "topic.creation.enable=true",  # the connectors' topic.creation.default.*: the broker creates none itself
              "scheduled.rebalance.max.delay.ms=0",  # one worker: a restarted one takes its connectors back at once
              ""]
    return "\n".join(lines)


def _classpath(settings: Settings) -> str:
    jars = sorted(settings.connect_jars_dir.glob("*.jar"))
    if not any(j.name.startswith("debezium-connector-postgres-") for j in jars) or \
            not any(j.name.startswith("connect-runtime-") for j in jars):
        raise CdcError(f"Kafka Connect's and Debezium's jars are missing in {settings.connect_jars_dir}: run `make` (it "
                       "fetches them once, include/jars/kafka-connect.pom.xml)")
    return os.pathsep.join(str(j) for j in jars)


def command(settings: Settings, files: WorkerFiles) -> list[str]:
    try:
        found = java("the Kafka Connect worker")
    except RuntimeError as exc:
        raise CdcError(str(exc)) from None
    return [found, *WORKER_HEAP.split(), WORKER_JIT, "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}", "-cp", _classpath(settings), MAIN,
            str(files.properties)]


def answers(url: str, timeout: float = 3.0) -> bool:
    """A Connect worker's REST API answers at `url` (its root says its version)."""
    info = get_json(url + "/", timeout)
    return bool(info and "version" in info)


def ready(url: str, timeout: float = 3.0) -> bool:
    """The worker has completed its startup (`GET /health`: healthy): it has joined its group and read its
    connectors' configurations and statuses. Before that its REST API may answer 404 for `/connectors` (a worker
    just started lists no connector, and a purge would delete none)."""
    info = get_json(url + "/health", timeout)
    return bool(info) and info.get("status") == "healthy"


def wait_ready(url: str, timeout: float = START_TIMEOUT_SECONDS) -> None:
    """Wait until the worker at `url` is ready; CdcError naming its last health answer when it is not in time."""
    deadline = time.monotonic() + timeout
    while not ready(url, timeout=1.0):
        if time.monotonic() >= deadline:
            raise CdcError(f"the Kafka Connect worker at {url} answers but did not complete its startup within "
                           f"{timeout:.0f} s (GET {url}/health: {get_json(url + '/health') or 'no JSON answer'})")
        time.sleep(0.5)


def _prepared(settings: Settings, bootstrap: str) -> WorkerFiles:
    """The worker's files written, once its broker answers (BrokerError-like CdcError otherwise)."""
    if not broker.answers(bootstrap):
        raise CdcError(f"no Kafka broker answers at {bootstrap}: the Connect worker keeps its connectors, offsets and "
                       "statuses there, and Debezium writes the changes there: start it first (`lakehouse kafka up`)")
    files = worker_files(settings)
    files.plugins.mkdir(parents=True, exist_ok=True)
    files.properties.write_text(worker_properties(files, bootstrap, settings.connect_url))
    return files


def up(settings: Settings, bootstrap: str) -> tuple[bool, str]:
    """Start the worker in the background unless one answers at LAKEHOUSE_CONNECT_URL; wait until it is ready (its
    startup complete). (started, a line); CdcError saying why it cannot start."""
    url = settings.connect_url
    if answers(url):
        wait_ready(url)
        return False, f"a Kafka Connect worker already answers at {url}"
    host, port = http_host_port("LAKEHOUSE_CONNECT_URL", url)
    if port_taken(host, port):
        raise CdcError(f"port {port} on {host} is taken by another program: free it, or set LAKEHOUSE_CONNECT_URL to "
                       "another http://host:port")
    files = _prepared(settings, bootstrap)
    process = files.daemon.start_and_wait(
        command(settings, files), lambda: ready(url, timeout=1.0), CdcError, what="the Kafka Connect worker",
        where=f" at {url}", timeout=START_TIMEOUT_SECONDS, stop_timeout=STOP_TIMEOUT_SECONDS, poll=0.5, group=False)
    return True, f"Kafka Connect worker up at {url} (pid {process.pid}; broker {bootstrap}; log {files.log})"


def serve(settings: Settings, bootstrap: str) -> None:
    """The worker in the foreground, in place of this process (a container's command: docker-compose.yaml)."""
    files = _prepared(settings, bootstrap)
    argv = command(settings, files)
    os.execv(argv[0], argv)


def down(settings: Settings) -> str:
    """Stop the worker `up` started (SIGTERM: its tasks stop and commit their offsets), waiting until it has exited."""
    return worker_files(settings).daemon.stop_saying(
        "Kafka Connect worker stopped", "no Connect worker started by `lakehouse cdc up` runs", STOP_TIMEOUT_SECONDS,
        group=False)


def rest(url: str, method: str, path: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, dict | list]:
    """One call to the worker's REST API: (HTTP status, its JSON answer); CdcError when the worker does not answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    except OSError as exc:
        raise CdcError(f"the Kafka Connect worker does not answer at {url} ({exc}): `lakehouse cdc up` starts "
                       "it") from None
    try:
        return status, json.loads(text) if text else {}
    except ValueError:
        return status, {"message": text.decode(errors="replace")[:400]}
