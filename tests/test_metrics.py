"""`lakehouse metrics` on records the product writes, no Spark: `lakehouse_job_up` from a job's lease and heartbeat
(a lease this test process holds: a live owner), a stalled heartbeat, and a table's last commit from its Delta log
(written by the deltalake package: an independent writer). What a real backfill recorded, over HTTP:
tests/test_demo.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from include.ops.metrics import METRICS, exposition
from include.records import lease
from include.records.heartbeats import write_heartbeat
from include.storage import delta as delta_store


def samples(settings) -> dict[tuple[str, tuple], float]:
    """(name, sorted labels) -> value of one scrape."""
    found = {}
    for family in text_string_to_metric_families(exposition(settings)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_job_up_follows_its_lease_and_heartbeat_and_a_stall_says_so(settings, registry):
    job = "bronze_clickstream"
    up = ("lakehouse_job_up", (("job", job),))
    before = samples(settings)
    assert before[up] == 0.0
    assert {k[1] for k in before if k[0] == "lakehouse_job_up"} == {(("job", j),) for j in registry.order}
    held = lease.acquire(settings, job, trigger="processing-time=10 seconds")
    try:
        write_heartbeat(settings, job, status="running", batch_id=3)
        running = samples(settings)
        assert running[up] == 1.0
        assert 0 <= running[("lakehouse_job_heartbeat_age_seconds", (("job", job),))] < 60
        old = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        write_heartbeat(settings, job, status="running", batch_id=3, updated_at=old)
        stalled = samples(settings)
        assert stalled[up] == 0.0
        assert stalled[("lakehouse_job_problem", (("job", job), ("problem", "stalled")))] == 1.0
        assert stalled[("lakehouse_job_heartbeat_age_seconds", (("job", job),))] > 3500
    finally:
        held.release()
    assert samples(settings)[up] == 0.0


def test_a_tables_last_commit_is_its_delta_logs_and_every_family_is_documented(settings):
    path = settings.layout.table("gold/user_activity_5m")
    delta_store.append_rows(path, {"user_id": "string", "events": "long"}, [{"user_id": "a", "events": 1}])
    delta_store.append_rows(path, {"user_id": "string", "events": "long"}, [{"user_id": "b", "events": 2}])
    found = samples(settings)
    table = (("table", "gold/user_activity_5m"),)
    history = delta_store.open_table(path).history(1)[0]
    assert found[("lakehouse_table_version", table)] == delta_store.latest_version(path) == history["version"]
    assert found[("lakehouse_table_last_commit_timestamp_seconds", table)] == history["timestamp"] / 1000
    assert not any(k[0].startswith("lakehouse_table") and k[1] != table for k in found)  # no other table exists
    names = {m.name for m in METRICS}
    assert {k[0] for k in found} <= names and all(m.name.startswith("lakehouse_") for m in METRICS)
    assert all(set(dict(k[1])) <= {"job", "table", "problem"} for k in found)  # bounded labels: no run id, no time
