"""The stream-stream join's oracle: what gold_order_payments must hold for the clickstream and payments landed."""

from __future__ import annotations

from datetime import timedelta

from include import checkpoints
from include.generator import GeneratorConfig, produce_to_topic
from include.storage import delta as delta_store
from tests.support.helpers import generate


def expected_join(settings, registry):
    """Paid pairs {(order_id, payment_id): (order_time, payment_time, amount)} and unmatched purchases."""
    within = timedelta(seconds=registry.job("gold_order_payments").transform.within_seconds)
    clicks = delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()
    orders = {c["event_id"]: c for c in clicks if c["event_type"] == "purchase"}
    pairs = {}
    for p in delta_store.read_table(settings.layout.table("silver/payments")).to_pylist():
        order = orders.get(p["order_id"])
        if order and order["event_time"] <= p["payment_time"] <= order["event_time"] + within:
            pairs[(order["event_id"], p["payment_id"])] = (order["event_time"], p["payment_time"], p["amount"])
    paid_orders = {order_id for order_id, _ in pairs}
    unmatched = {o: c["event_time"] for o, c in orders.items() if o not in paid_orders}
    return pairs, unmatched, within


def land_both(settings, topic: str, events: int = 3000, seed: int = 31, files: int = 6):
    """Clickstream (no late lines) as landing files, and the payments of its purchases on the Kafka topic."""
    from include.kafka.connection import bootstrap_servers

    generate(settings, events=events, seed=seed, files=files, late_fraction=0.0)
    config = GeneratorConfig(events=events, seed=seed, files=files, late_fraction=0.0)
    return produce_to_topic(bootstrap_servers(settings), topic, "payments", config)


def assert_join_is_exact(settings, registry):
    rows = delta_store.read_table(settings.layout.table("gold/order_payments")).to_pylist()
    pairs, unmatched, within = expected_join(settings, registry)
    paid = {(r["order_id"], r["payment_id"]): (r["order_time"], r["payment_time"], r["amount"])
            for r in rows if r["paid"]}
    assert len(paid) == sum(r["paid"] for r in rows), "a pair was emitted twice"
    assert paid == pairs

    unpaid = [r for r in rows if not r["paid"]]
    assert all(r["payment_id"] is None and r["payment_time"] is None and r["amount"] is None for r in unpaid)
    unpaid_orders = {r["order_id"] for r in unpaid}
    assert len(unpaid_orders) == len(unpaid), "an unpaid purchase was emitted twice"
    watermark_ms = checkpoints.committed_watermark_ms(settings.layout.checkpoint("gold_order_payments"))
    decided = {o for o, t in unmatched.items() if (t + within).timestamp() * 1000 < watermark_ms}
    pending = {o for o, t in unmatched.items() if (t + within).timestamp() * 1000 > watermark_ms}
    assert decided and pending, "test data should leave purchases on both sides of the final watermark"
    assert decided <= unpaid_orders
    assert not unpaid_orders & pending
    assert unpaid_orders <= set(unmatched)
