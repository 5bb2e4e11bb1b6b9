"""Great Expectations on the alerts table of a stateful_process job: good alerts pass, each defect fails its check.

Small synthetic Delta tables (silver logins, the alerts the job would emit, the job's checkpoint watermark),
as in tests/test_quality_kinds.py.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from include.quality import run_quality
from include.quality.suites import AlertTable, quality_tables
from tests.support.quality_data import NOW, START, recorded, write, write_checkpoint

ALERTS, JOB, LOGINS = "gold/alerts", "gold_fraud_alerts", "silver/logins"
ALERT_CHECKS = {"alert_in_window", "no_future_windows", "keys_not_null", "event_count_positive", "unique_rows",
                "freshness", "one_alert_per_burst"}


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
    assert spec.within_seconds == 600 and spec.freshness_lag_seconds == 1200  # watermark + within (include/jobs.yaml)
    assert {c.name for c in spec.checks} == ALERT_CHECKS


def test_good_alerts_pass(settings, registry):
    make_alerts(settings, registry)
    report = validate(settings, registry)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == ALERT_CHECKS
    freshness = json.loads(next(r.observed_value for r in report.results if r.expectation == "freshness"))
    assert freshness["freshness_lag_seconds"] == 600 and freshness["watermark_source"] == "checkpoint"


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


@pytest.mark.parametrize(("mutate", "expected"), [
    (_window_too_long, "alert_in_window"),
    (_null_entity, "keys_not_null"),
    (_duplicate, "unique_rows"),
    (_overlapping, "one_alert_per_burst"),
    (_no_events, "event_count_positive"),
], ids=["window_too_long", "null_entity", "duplicated_row", "overlapping", "no_events"])
def test_each_alert_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_alerts(settings, registry, mutate)
    report = validate(settings, registry)
    assert report.failed() == {expected}, report.render()
    assert re.search(rf"FAIL +{ALERTS} +{expected}", report.render()), report.render()
    assert {r["expectation"] for r in recorded(settings, report.run_id) if not r["success"]} == {expected}


def test_alerts_behind_the_source_are_stale(settings, registry):
    make_alerts(settings, registry, watermark_minute=20)  # 40 minutes behind the latest login; allowed: 20
    report = validate(settings, registry)
    assert report.failed() == {"freshness"}, report.render()
