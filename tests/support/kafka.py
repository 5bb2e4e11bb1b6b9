"""Test helpers for Kafka: a registry whose payments come from a topic of their own, topics deleted."""

from __future__ import annotations

import uuid


def payments_from_kafka(raw: dict, topic: str | None = None, **source) -> str:
    """Make the registry document's `payments` a Kafka source on a topic of its own (returned), read by
    bronze_payments with `source` (e.g. max_offsets_per_trigger)."""
    topic = topic or f"payments-{uuid.uuid4().hex[:8]}"
    payments = raw["sources"]["payments"]
    payments.pop("path", None)
    payments["kafka"] = {"topic": topic}
    raw["jobs"]["bronze_payments"]["source"] = {"kafka": "payments", **source}
    return topic


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Delete the topics that exist, and wait until the broker no longer lists them."""
    import time

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = [t for t in topics if t in admin.list_topics(timeout=10).topics]
    if not existing:
        return
    for future in admin.delete_topics(existing).values():
        future.result(30)
    deadline = time.monotonic() + 60
    while set(existing) & set(admin.list_topics(timeout=10).topics):
        if time.monotonic() > deadline:
            raise AssertionError(f"topics {existing} still listed 60 s after their deletion")
        time.sleep(0.2)
