"""Great Expectations on the alerts table of a stateful_process job: good alerts pass, each defect fails its check.

Small synthetic Delta tables (silver logins, the alerts the job would emit, the job's checkpoint watermark),
as in tests/test_quality_kinds.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from include.quality import run_quality
from include.quality.suites import AlertTable, quality_tables
from tests.support.quality_data import NOW, START, assert_fails_only, write, write_checkpoint

ALERTS, JOB, LOGINS = "gold/alerts", "gold_fraud_alerts", "silver/logins"
ALERT_CHECKS = {"alert_in_window", "alert_types_known", "no_future_windows", "keys_not_null", "event_count_positive",
                "unique_rows", "freshness", "one_alert_per_burst"}


def login(user: str, minute: float, outcome: str = "failure") -> dict:
    return {"user_id": user, "outcome": outcome, "event_time": START + timedelta(minutes=minute)}


def alert(user: str | None, first: float, last: float, count: int = 5) -> dict:
    return {"alert_type": "FRAUD_ALERT", "entity": user, "alert_time": START + timedelta(minutes=last),
            "window_start": START + timedelta(minutes=first), "event_count": count,
            "detail": f"{count} failed logins within 10 minutes"}


def make_alerts(settings, registry, mutate=None, watermark_minute: float = 50) -> list[dict]:
    """user_a fails at minutes 0-4 and 20-24 (two alerts), user_b at 30-34 (one); logins go on to minute 60."""
    logins = [login(u, m) for u, first in (("user_a", 0), ("user_a", 20), ("user_b", 30)) for m in range(first, first + 5)]
    logins.append(login("user_c", 60, "success"))
    write(settings, registry, LOGINS, logins)
    rows = [alert("user_a", 0, 4), alert("user_a", 20, 24), alert("user_b", 30, 34)]
    if mutate:
        mutate(rows)
    write(settings, registry, ALERTS, rows)
    write_checkpoint(settings, JOB, START + timedelta(minutes=watermark_minute))
    return rows


def validate(settings, registry):
    return run_quality(settings, registry, [ALERTS], now=NOW)


def test_alert_spec_follows_the_registry(registry):
    spec = quality_tables(registry)[ALERTS]
    assert isinstance(spec, AlertTable)
    assert spec.windows == {"FRAUD_ALERT": 600} and spec.freshness_lag_seconds == 1200  # watermark + within
    assert {c.name for c in spec.checks} == ALERT_CHECKS


def test_good_alerts_pass(settings, registry):
    make_alerts(settings, registry)
    report = validate(settings, registry)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == ALERT_CHECKS
    freshness = json.loads(next(r.observed_value for r in report.results if r.expectation == "freshness"))
    assert freshness["freshness_lag_seconds"] == 600  # gold/alerts' writers: fraud alerts, stale services
    assert [(w["job"], w.get("watermark_source")) for w in freshness["writers"]] == [
        ("gold_fraud_alerts", "checkpoint"), ("gold_stale_services", None)]


def _window_too_long(rows):
    rows[0]["window_start"] -= timedelta(minutes=7)  # 11 minutes before the alert


def _null_entity(rows):
    rows.append(alert(None, 40, 41))


def _duplicate(rows):
    rows.append(dict(rows[1]))


def _overlapping(rows):  # a second alert counting user_a's failures of the first burst again
    rows.append(alert("user_a", 2, 6))


def _no_events(rows):
    rows[2]["event_count"] = 0


def _unknown_type(rows):
    rows.append({**alert("user_c", 40, 41), "alert_type": "FRAUD"})


@pytest.mark.parametrize(("mutate", "expected"), [
    (_window_too_long, "alert_in_window"),
    (_null_entity, "keys_not_null"),
    (_duplicate, "unique_rows"),
    (_overlapping, "one_alert_per_burst"),
    (_no_events, "event_count_positive"),
    (_unknown_type, "alert_types_known"),
], ids=["window_too_long", "null_entity", "duplicated_row", "overlapping", "no_events", "unknown_type"])
def test_each_alert_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_alerts(settings, registry, mutate)
    report = validate(settings, registry)
    assert_fails_only(settings, report, ALERTS, expected)


def test_alerts_behind_the_source_are_stale(settings, registry):
    make_alerts(settings, registry, watermark_minute=20)  # 40 minutes behind the latest login; allowed: 20
    report = validate(settings, registry)
    assert report.failed() == {"freshness"}, report.render()


def test_a_table_shared_with_processing_time_alerts(settings, raw):
    """gold/alerts written by gold_fraud_alerts and a stale_services job: stale/recovered rows mix processing and
    event time, so the window and burst checks leave them out; freshness follows the most lagging writer."""
    from include.registry import build_registry

    raw["jobs"]["gold_stale_services"] = {
        "source": {"table": "silver/service_logs", "watermark": "10 minutes"},
        "transform": {"kind": "stateful_process", "processor": "stale_services", "keys": ["service"],
                      "params": {"silent_for": "15 minutes"}},
        "sink": {"table": ALERTS, "mode": "append"}}
    registry = build_registry(raw)
    spec = quality_tables(registry)[ALERTS]
    assert [w.job_id for w in spec.writers] == ["gold_fraud_alerts", "gold_stale_services"]
    assert spec.windows == {"FRAUD_ALERT": 600} and spec.freshness_lag_seconds == 1500  # 10 min + 15 min

    def stale(kind: str, service: str, at: datetime, since_minute: float) -> dict:
        return {"alert_type": kind, "entity": service, "alert_time": at, "window_start": START + timedelta(minutes=since_minute),
                "event_count": 3, "detail": "-"}

    detected = NOW - timedelta(days=30)  # processing time: long after the logs' event times
    mixed = [stale("stale", "svc_a", detected, 5), stale("recovered", "svc_a", START + timedelta(minutes=40), 5),
             stale("stale", "svc_a", detected + timedelta(hours=1), 40)]
    make_alerts(settings, registry, lambda rows: rows.extend(mixed))
    for minutes in ((0, 5, 20), (60,)):  # versions 1 and 2 of silver/service_logs
        write(settings, registry, "silver/service_logs",
              [{"service": "svc_a", "level": "INFO", "event_time": START + timedelta(minutes=m), "_source_file": "f",
                "_ingested_at": START} for m in minutes])

    def stale_job_read(version: int) -> None:  # its latest batch read silver/service_logs up to `version`
        write_checkpoint(settings, "gold_stale_services", START, {"sourceVersion": 1, "reservoirVersion": version + 1,
                                                                  "index": -1, "isStartingVersion": False})

    stale_job_read(2)
    report = validate(settings, registry)
    assert not report.failed(), report.render()
    freshness = json.loads(next(r.observed_value for r in report.results if r.expectation == "freshness"))
    assert [(w["job"], w["freshness_lag_seconds"]) for w in freshness["writers"]] == [
        ("gold_fraud_alerts", 600), ("gold_stale_services", 0)]
    assert freshness["writers"][1]["read_position"] == "silver/service_logs version 2 (batch 0)"

    stale_job_read(1)  # it has not read the log of minute 60: 40 minutes behind, 25 allowed
    report = validate(settings, registry)
    assert report.failed() == {"freshness"}, report.render()
