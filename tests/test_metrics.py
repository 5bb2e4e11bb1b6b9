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
    from_logs = ("lakehouse_table_version", "lakehouse_table_last_commit_timestamp_seconds")
    assert not any(k[0] in from_logs and k[1] != table for k in found)  # no other table exists
    names = {m.name for m in METRICS}
    assert {k[0] for k in found} <= names and all(m.name.startswith("lakehouse_") for m in METRICS)
    assert all(set(dict(k[1])) <= {"job", "table", "problem", "check", "severity", "operator", "mode",
                                                     "topic", "partition", "le"} for k in found)  # no run id, no time


def test_a_checks_latest_result_is_what_the_quality_metrics_say(settings):
    """Results recorded as a quality run records them: a blocking check failing, then passing in a later run; a
    table no job of the registry writes is left out (bounded labels)."""
    from include.records.quality_results import CheckResult, record

    def result(table: str, check: str, success: bool, severity: str = "blocking") -> CheckResult:
        return CheckResult(table, check, severity, success, "{}", "rows", 0, 1, 10, "pandas")

    first, later = datetime(2026, 12, 7, 10, tzinfo=UTC), datetime(2026, 12, 7, 11, tzinfo=UTC)
    record(settings, "run-1", first, [result("gold/user_activity_5m", "freshness", False),
                                      result("gold/user_activity_5m", "keys_not_null", True),
                                      result("gold/user_activity_5m", "no_rescued_fields", False, "warning"),
                                      result("gold/gone", "freshness", False)])
    table = "gold/user_activity_5m"
    found = samples(settings)
    assert found[("lakehouse_quality_check_success", (("check", "freshness"), ("severity", "blocking"),
                                                      ("table", table)))] == 0.0
    assert found[("lakehouse_quality_failing_checks", (("severity", "blocking"), ("table", table)))] == 1.0
    assert found[("lakehouse_quality_failing_checks", (("severity", "warning"), ("table", table)))] == 1.0
    assert found[("lakehouse_quality_last_validation_timestamp_seconds", (("table", table),))] == first.timestamp()
    assert not any(dict(k[1]).get("table") == "gold/gone" for k in found)
    record(settings, "run-2", later, [result(table, "freshness", True)])
    found = samples(settings)
    assert found[("lakehouse_quality_check_success", (("check", "freshness"), ("severity", "blocking"),
                                                      ("table", table)))] == 1.0
    assert found[("lakehouse_quality_failing_checks", (("severity", "blocking"), ("table", table)))] == 0.0
    assert found[("lakehouse_quality_last_validation_timestamp_seconds", (("table", table),))] == later.timestamp()
