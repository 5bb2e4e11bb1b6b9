"""Messages onto a topic: the test-data generator's lines (`lakehouse generate --to kafka`), one message per line."""

from __future__ import annotations

import json
import logging

from include.kafka.broker import LIBRDKAFKA_LOG, BrokerError, admin_metadata

log = logging.getLogger(__name__)


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> int:
    """Create `topic` with `partitions` unless it exists; returns its partition count."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin, metadata = admin_metadata(bootstrap, timeout)
    existing = metadata.topics.get(topic)
    if existing is not None and existing.error is None:
        return len(existing.partitions)
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout=timeout)
    except KafkaException as exc:
        if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise BrokerError(f"cannot create topic {topic!r} at {bootstrap}: {exc.args[0].str()}") from None
    log.info("created topic %s with %d partitions at %s", topic, partitions, bootstrap)
    return partitions


def message_key(line: str, key_field: str | None) -> bytes | None:
    """The line's `key_field` value as the message key (None for a line that is not a JSON object with it)."""
    if key_field is None:
        return None
    try:
        value = json.loads(line).get(key_field)
    except (ValueError, AttributeError):
        return None
    return None if value is None else str(value).encode()


def produce_lines(bootstrap: str, topic: str, lines: list[str], key_field: str | None = None,
                  timeout: float = 60.0) -> int:
    """Each line as one message (its bytes as they are), keyed by `key_field`; waits until the broker has every one
    (acks=all, idempotent: a retry writes no duplicate). Returns the count; BrokerError if any was refused."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "logger": LIBRDKAFKA_LOG})
    failures: list[str] = []

    def delivered(error, message) -> None:
        if error is not None:
            failures.append(error.str())

    for line in lines:
        while True:
            try:
                producer.produce(topic, value=line.encode(), key=message_key(line, key_field), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        producer.poll(0)
    left = producer.flush(timeout)
    if left or failures:
        raise BrokerError(f"{left + len(failures)} of {len(lines)} messages were not delivered to topic {topic!r} at "
                          f"{bootstrap}: {(failures or ['flush timed out'])[0]}")
    return len(lines)
