"""What `lakehouse metrics` reads beyond the records the jobs write: each table's rows and files from its Delta log (kept
per version, so a scrape reads only the tables that changed since the last), and each Kafka-fed job's lag on the
broker (the topics' latest offsets against what its checkpoint's last committed batch read up to)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import pyarrow as pa

from include.checkpoints.kafka_offsets import checkpoint_offsets
from include.kafka.broker import BrokerError
from include.kafka.connection import bootstrap_servers
from include.kafka.offsets import topic_ranges
from include.registry import Registry
from include.settings import Settings
from include.storage import delta as delta_store
from include.storage.paths import StoragePath

log = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 3.0  # a scrape answers without the lag rather than late
BROKER_RETRY_SECONDS = 60.0  # a broker that did not answer is asked again after this long (not at every scrape)
_silent_until: dict[str, float] = {}  # bootstrap -> when to ask it again


@dataclass(frozen=True)
class Contents:
    version: int
    rows: int
    files: int


_contents: dict[str, Contents] = {}  # table location -> its contents at the version read last
_contents_lock = threading.Lock()


def table_contents(path: StoragePath, version: int) -> Contents:
    """The table's rows (its files' record counts in the log) and data files at `version`, read from its log once per
    version."""
    key = str(path)
    with _contents_lock:
        known = _contents.get(key)
    if known is not None and known.version == version:
        return known
    actions = pa.table(delta_store.open_table(path, version=version).get_add_actions(flatten=True))
    counts = actions["num_records"].to_pylist() if "num_records" in actions.column_names else []
    found = Contents(version, sum(n or 0 for n in counts), actions.num_rows)
    with _contents_lock:
        _contents[key] = found
    return found


@dataclass(frozen=True)
class Lag:
    job: str
    topic: str
    partition: int
    messages: int


def kafka_lags(settings: Settings, registry: Registry) -> list[Lag]:
    """Per Kafka-fed job (its CDC topics too) that has read, per topic partition: messages on the broker its
    checkpoint has not read yet. Each broker is asked once; one that does not answer is logged and leaves its jobs
    out, and is not asked again for BROKER_RETRY_SECONDS (a scrape stays quick while it is down)."""
    positions: dict[str, dict[str, dict[int, int]]] = {}  # job -> what its checkpoint read up to
    wanted: dict[str, dict[str, list[str]]] = {}  # bootstrap -> topic -> the jobs reading it
    for job_id in registry.order:
        sources = [s for s in registry.jobs[job_id].sources if s.kafka is not None]
        read = checkpoint_offsets(settings.layout.checkpoint(job_id)) if sources else {}
        if not read:
            continue
        positions[job_id] = read
        for source in sources:
            try:
                bootstrap = bootstrap_servers(settings, source.kafka.connection)
            except ValueError as exc:
                log.warning("metrics: the Kafka lag of %s is not known (%s)", job_id, exc)
                continue
            for topic in source.kafka.topics:
                wanted.setdefault(bootstrap, {}).setdefault(topic, []).append(job_id)
    lags: list[Lag] = []
    for bootstrap, topics in wanted.items():
        if time.monotonic() < _silent_until.get(bootstrap, 0.0):
            continue
        try:
            ranges = topic_ranges(bootstrap, tuple(topics), timeout=BROKER_TIMEOUT_SECONDS)
        except BrokerError as exc:
            _silent_until[bootstrap] = time.monotonic() + BROKER_RETRY_SECONDS
            log.warning("metrics: the Kafka lag of %s is not known (%s); asked again in %.0f s", ", ".join(sorted(
                {j for jobs in topics.values() for j in jobs})), exc, BROKER_RETRY_SECONDS)
            continue
        for topic, partitions in ranges.items():
            for job_id in topics[topic]:
                for p in partitions:
                    position = max(positions[job_id].get(topic, {}).get(p.partition, p.earliest), p.earliest)
                    lags.append(Lag(job_id, topic, p.partition, max(0, p.latest - position)))
    return sorted(lags, key=lambda lag: (lag.job, lag.topic, lag.partition))
