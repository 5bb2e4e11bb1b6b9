"""Where a driver sends its OpenLineage events (LAKEHOUSE_LINEAGE): a Kafka topic on the product's broker (the
default), JSON lines under `<local>/_lineage/`, an OpenLineage HTTP endpoint (Marquez, DataHub), or nowhere.

One emitter per process, made at its first event. Nothing of it is on a micro-batch's path: a run's START and its
end are the only events; Kafka's are sent in the background and waited for (at most FLUSH_SECONDS) when the run ends.
A driver that cannot reach its broker or endpoint says so once and sends no more events: lineage never stops a job.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from include.kafka.broker import LIBRDKAFKA_LOG, BrokerError
from include.kafka.produce import ensure_topic
from include.registry import Registry
from include.settings import Settings

log = logging.getLogger(__name__)

FLUSH_SECONDS = 5.0
BROKER_TIMEOUT_SECONDS = 2.0
HTTP_TIMEOUT_SECONDS = 5.0
LINEAGE_PARTITIONS = 1  # one partition: the events in the order the drivers sent them


def events_file(settings: Settings) -> Path:
    """This process's JSON lines (LAKEHOUSE_LINEAGE=file): one file per process, so that no two write one line."""
    return settings.local / "_lineage" / f"openlineage-{os.getpid()}.jsonl"


def ensure_lineage_topic(settings: Settings, bootstrap: str, topics: tuple[str, ...]) -> None:
    """The drivers' events' topic, when `topics` name it, made on `bootstrap` if missing, as a driver makes it before its
    first event: the product's own topic, so a job reading it before any event was sent (LAKEHOUSE_LINEAGE other than
    `kafka`, a new broker) reads it empty instead of being refused for a missing topic."""
    if settings.lineage_topic in topics:
        ensure_topic(bootstrap, settings.lineage_topic, partitions=LINEAGE_PARTITIONS)


def _kafka(settings: Settings):
    from openlineage.client.transport.kafka import KafkaConfig, KafkaTransport

    bootstrap = settings.kafka_bootstrap
    try:
        ensure_topic(bootstrap, settings.lineage_topic, partitions=LINEAGE_PARTITIONS, timeout=BROKER_TIMEOUT_SECONDS)
    except BrokerError as exc:
        log.warning("OpenLineage events are not sent: no broker answers at %s (%s); LAKEHOUSE_LINEAGE says where "
                    "they go", bootstrap, exc)
        return None
    config = {"bootstrap.servers": bootstrap, "message.timeout.ms": str(int(FLUSH_SECONDS * 1000)),
              "client.id": "lakehouse-lineage", "logger": LIBRDKAFKA_LOG}  # librdkafka's lines: not on stderr
    return KafkaTransport(KafkaConfig(config=config, topic=settings.lineage_topic, flush=False))


def _transport(settings: Settings):
    """The client's transport for LAKEHOUSE_LINEAGE (None: off, or no broker). OpenLineage's client is imported here
    only (a second to import): a driver with lineage off never loads it."""
    from openlineage.client.transport.file import FileConfig, FileTransport
    from openlineage.client.transport.http import HttpConfig, HttpTransport

    if settings.lineage == "off":
        return None
    if settings.lineage == "kafka":
        return _kafka(settings)
    if settings.lineage == "file":
        path = events_file(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        return FileTransport(FileConfig(log_file_path=str(path), append=True))
    return HttpTransport(HttpConfig(url=settings.lineage, timeout=HTTP_TIMEOUT_SECONDS))


class Emitter:
    """This process's OpenLineage client (None: lineage off or unreachable)."""

    def __init__(self, settings: Settings):
        transport = None if settings.lineage == "off" else _transport(settings)
        if transport is not None:
            from openlineage.client import OpenLineageClient

            self.client = OpenLineageClient(transport=transport)
        else:
            self.client = None
        self.where = settings.lineage

    def emit(self, event) -> None:
        if self.client is None:
            return
        try:
            self.client.emit(event)
        except Exception as exc:  # an endpoint down: said once, the job goes on
            log.warning("OpenLineage events are not sent any more (%s: %s)", self.where, exc)
            self.client = None

    def flush(self) -> None:
        """Wait, at most FLUSH_SECONDS, for the events sent in the background (Kafka) to be delivered."""
        transport = self.client.transport if self.client is not None else None
        if getattr(transport, "kind", None) == "kafka" and not transport.wait_for_completion(FLUSH_SECONDS):
            log.warning("OpenLineage events were not all delivered to %s within %.0f s", self.where, FLUSH_SECONDS)


_emitters: dict[tuple[str, str, str], Emitter] = {}
_lock = threading.Lock()


def emitter(settings: Settings) -> Emitter:
    """The process's emitter for these settings' destination (made at the first call)."""
    key = (settings.lineage, settings.lineage_topic, settings.kafka_bootstrap if settings.lineage == "kafka" else
           str(settings.local))
    with _lock:
        if key not in _emitters:
            _emitters[key] = Emitter(settings)
        return _emitters[key]


class JobRun:
    """One run of a job as OpenLineage sees it: START when made, then COMPLETE, FAIL or ABORT at :meth:`end`.

    The START is sent from a thread of its own: a driver's first event loads OpenLineage's client and reaches the
    broker (about a second), which the run does not wait for; :meth:`end` waits for it (at most FLUSH_SECONDS)."""

    def __init__(self, settings: Settings, registry: Registry, job_id: str, live: bool):
        self.settings, self.job_id, self.live = settings, job_id, live
        self.emitter: Emitter | None = None
        self.run_id = ""
        self._started = threading.Thread(target=self._start, args=(registry,), name="openlineage-start", daemon=True)
        self._started.start()

    def _start(self, registry: Registry) -> None:
        self.emitter = emitter(self.settings)
        if self.emitter.client is not None:
            from openlineage.client.uuid import generate_new_uuid  # a UUIDv7, as the spec asks of a run id

            self.run_id = str(generate_new_uuid())
            self._emit(registry, "START")

    def _emit(self, registry: Registry, state: str, error: str | None = None) -> None:
        if self.emitter is None or self.emitter.client is None:
            return
        from include.lineage.events import run_event

        try:
            event = run_event(self.settings, registry, self.job_id, state, self.run_id, live=self.live, error=error)
        except Exception:  # an event the registry cannot describe: said, the job goes on
            log.exception("job=%s: its OpenLineage %s event was not built", self.job_id, state)
            return
        self.emitter.emit(event)

    def end(self, registry: Registry, failure: BaseException | None = None) -> None:
        """The run ended: COMPLETE, FAIL (an error) or ABORT (interrupted); its events delivered (Kafka: waited for
        at most FLUSH_SECONDS)."""
        self._started.join(FLUSH_SECONDS)
        if self._started.is_alive():
            log.warning("job=%s: its OpenLineage START was not sent within %.0f s; no end event either", self.job_id,
                        FLUSH_SECONDS)
            return
        if failure is None:
            self._emit(registry, "COMPLETE")
        elif isinstance(failure, Exception):
            self._emit(registry, "FAIL", f"{type(failure).__name__}: {failure}")
        else:
            self._emit(registry, "ABORT")
        if self.emitter is not None:
            self.emitter.flush()
