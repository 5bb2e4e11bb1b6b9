"""A single-node Kafka broker (KRaft, combined broker + controller) run from Kafka's jars: `lakehouse kafka up |
down | status`.

Its data directory is formatted once and kept under `LAKEHOUSE_ROOT/_kafka/` with the broker's log, its
server.properties and its pid file. It listens on `LAKEHOUSE_KAFKA_BOOTSTRAP` (127.0.0.1:9092 by default); its
controller on the next port. Whether a broker *answers* is asked with Kafka's protocol (confluent-kafka's admin
client), never inferred from a pid.
"""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from include.daemons import DaemonFiles, free_port_block, java, port_taken
from include.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 90.0
STOP_TIMEOUT_SECONDS = 60.0
BROKER_HEAP = "-Xms256m -Xmx768m"
# C1 alone: a development broker starts on 2.9 CPU-seconds instead of 4.6, and idles the same (measured on 2 cores)
BROKER_JIT = "-XX:TieredStopAtLevel=1"
LOG_CONFIG = Path(__file__).with_name("broker_log4j2.properties")


class BrokerError(RuntimeError):
    """The broker cannot be started or reached; the message is one line saying why."""


@dataclass(frozen=True)
class Topic:
    name: str
    partitions: int


@dataclass(frozen=True)
class BrokerFiles(DaemonFiles, daemon="the Kafka broker", log="broker.log", pid="broker.pid"):
    """Where `lakehouse kafka up` keeps a broker's files (Layout.kafka)."""

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"


def host_port(bootstrap: str) -> tuple[str, int]:
    """The first server of a bootstrap list."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    return host, int(port)


def answers(bootstrap: str, timeout: float = 3.0) -> bool:
    """A broker at `bootstrap` answers a metadata request."""
    try:
        list_topics(bootstrap, timeout)
    except BrokerError:
        return False
    return True


def admin_metadata(bootstrap: str, timeout: float, unreachable: str = "broker unreachable at") -> tuple[Any, Any]:
    """An admin client on `bootstrap` and the cluster's metadata (its topics); BrokerError `<unreachable> <bootstrap>
    (<librdkafka's reason>)` when no broker answers within `timeout`."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": int(timeout * 1000),
                         "logger": LIBRDKAFKA_LOG})
    try:
        return admin, admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"{unreachable} {bootstrap} ({exc.args[0].str()})") from None


def list_topics(bootstrap: str, timeout: float = 5.0) -> list[Topic]:
    """The topics (not Kafka's internal ones) with their partition counts; BrokerError when none answers."""
    _, metadata = admin_metadata(bootstrap, timeout, unreachable="no Kafka broker answers at")
    return sorted((Topic(name, len(t.partitions)) for name, t in metadata.topics.items() if not name.startswith("__")),
                  key=lambda t: t.name)


# librdkafka's own lines ("Connect to ... failed: Connection refused", repeated while a broker starts or is down):
# the callers say it once, in their words.
LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)


def server_properties(files: BrokerFiles, host: str, port: int) -> str:
    """KRaft combined mode, one node: replication factors and min ISR 1 for Kafka's own topics."""
    controller = f"{host}:{port + 1}"
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers={controller}",
        f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{controller}",
        f"advertised.listeners=PLAINTEXT://{host}:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={files.data}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",  # a typo in a topic name is an error, not a new empty topic
        # KRaft's controller appends a no-op record to its metadata log this often (Kafka: every 500 ms): an idle broker
        # used 1.5-1.6 CPU-seconds a minute, 0.9-1.1 with 10 s (docs/benchmarks.md); one node has no follower to keep alive.
        "metadata.max.idle.interval.ms=10000",
        "log.retention.hours=-1",  # the lakehouse's demo data is small: keep it until topics are deleted
        "",
    ])


def _java() -> str:
    try:
        return java("Kafka's broker")
    except RuntimeError as exc:
        raise BrokerError(str(exc)) from None


def _classpath(settings: Settings) -> str:
    jars = sorted(settings.kafka_jars_dir.glob("*.jar"))
    if not any(j.name.startswith("kafka_2.13-") for j in jars):
        raise BrokerError(f"Kafka's broker jars are missing in {settings.kafka_jars_dir}: run `make` (it fetches them "
                          "once, include/jars/kafka-broker.pom.xml)")
    return os.pathsep.join(str(j) for j in jars)


def free_port_pair() -> int:
    """A port p with p and p + 1 free on 127.0.0.1: a private broker's listener and its controller's (the
    tests' and benchmarks' brokers)."""
    return free_port_block([0, 1])


def _java_command(settings: Settings, main: str, *args: str) -> list[str]:
    return [_java(), *BROKER_HEAP.split(), BROKER_JIT, f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
            "-cp", _classpath(settings), main, *args]


def _format(settings: Settings, files: BrokerFiles) -> None:
    """Format the data directory once (a KRaft broker refuses an unformatted one)."""
    if (files.data / "meta.properties").exists():
        return
    files.data.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(_java_command(settings, "kafka.tools.StorageTool", "format", "--standalone", "-t",
                                          str(uuid.uuid4()), "-c", str(files.properties)),
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BrokerError(f"formatting {files.data} failed: {last[0]}")


def running_pid(files: BrokerFiles) -> int | None:
    """The pid of the broker `up` started, while that process lives."""
    return files.daemon.running_pid()


def up(settings: Settings, bootstrap: str) -> tuple[bool, str]:
    """Start the broker in the background unless one answers at `bootstrap`; wait until it answers.
    Returns (started, message); raises BrokerError saying why it cannot start."""
    files = BrokerFiles(settings.layout.kafka)
    if answers(bootstrap):
        return False, f"a Kafka broker already answers at {bootstrap}"
    host, port = host_port(bootstrap)
    for taken in (port, port + 1):
        if port_taken(host, taken):
            raise BrokerError(f"port {taken} on {host} is taken by another program (the broker needs {port} and "
                              f"{port + 1} for its controller): free it, or set LAKEHOUSE_KAFKA_BOOTSTRAP to another "
                              "host:port")
    files.home.mkdir(parents=True, exist_ok=True)
    files.properties.write_text(server_properties(files, host, port))
    _format(settings, files)
    process = files.daemon.start_and_wait(  # outlives this command
        _java_command(settings, "kafka.Kafka", str(files.properties)), lambda: answers(bootstrap, timeout=1.0),
        BrokerError, what="the broker", where=f" at {bootstrap}", timeout=START_TIMEOUT_SECONDS,
        stop_timeout=STOP_TIMEOUT_SECONDS, poll=0.5, group=False)
    return True, f"Kafka broker up at {bootstrap} (pid {process.pid}; data {files.data}; log {files.log})"


def down(settings: Settings) -> str:
    """Stop the broker `up` started (SIGTERM: a controlled shutdown), waiting until it has exited."""
    return BrokerFiles(settings.layout.kafka).daemon.stop_saying(
        "Kafka broker stopped", "no broker started by `lakehouse kafka up` runs", STOP_TIMEOUT_SECONDS, group=False)
