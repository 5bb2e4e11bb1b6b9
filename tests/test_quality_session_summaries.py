"""Great Expectations on the session summaries of the `sessionizer` processor: good summaries pass, each defect
fails its check.

Small synthetic Delta tables (silver clickstream, the summaries the job would emit, the job's checkpoint
watermark), as in tests/test_quality_alerts.py.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from include.quality import run_quality
from include.quality.suites import SessionSummaryTable, quality_tables
from tests.support.quality_data import NOW, START, assert_fails_only, write, write_checkpoint

SUMMARIES, JOB, CLICKS = "gold/user_session_summaries", "gold_user_session_summaries", "silver/clickstream"
GAP = timedelta(minutes=30)  # include/jobs.yaml
SUMMARY_CHECKS = {"summary_span", "closed_after_gap", "no_future_windows", "keys_not_null", "event_count_positive",
                  "values_in_range", "unique_rows", "freshness", "sessions_apart"}


def click(user: str, minute: float, value: float = 1.0) -> dict:
    return {"event_id": f"{user}-{minute}", "user_id": user, "event_type": "view", "value": value,
            "event_time": START + timedelta(minutes=minute), "_source_file": "f.jsonl", "_ingested_at": START}


def summary(user: str | None, first: float, last: float, count: int = 3, total: float = 3.0) -> dict:
    end = START + timedelta(minutes=last)
    return {"user_id": user, "session_start": START + timedelta(minutes=first), "session_end": end,
            "event_count": count, "total_value": total, "closed_at": end + GAP}


def make_summaries(settings, registry, mutate=None, watermark_minute: float = 110) -> list[dict]:
    """user_a clicks at minutes 0-2 and 60-62 (two sessions), user_b at 10-12; clicks go on to minute 120."""
    clicks = [click(u, m) for u, first in (("user_a", 0), ("user_a", 60), ("user_b", 10)) for m in range(first, first + 3)]
    clicks.append(click("user_c", 120))
    write(settings, registry, CLICKS, clicks)
    rows = [summary("user_a", 0, 2), summary("user_a", 60, 62), summary("user_b", 10, 12)]
    if mutate:
        mutate(rows)
    write(settings, registry, SUMMARIES, rows)
    write_checkpoint(settings, JOB, START + timedelta(minutes=watermark_minute))
    return rows


def validate(settings, registry):
    return run_quality(settings, registry, [SUMMARIES], now=NOW)


def test_summary_spec_follows_the_registry(registry):
    spec = quality_tables(registry)[SUMMARIES]
    assert isinstance(spec, SessionSummaryTable)
    assert spec.keys == ("user_id",) and spec.apart_seconds == 1800
    assert spec.freshness_lag_seconds == 2400  # watermark + gap
    assert {c.name for c in spec.checks} == SUMMARY_CHECKS


def test_good_summaries_pass(settings, registry):
    make_summaries(settings, registry)
    report = validate(settings, registry)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == SUMMARY_CHECKS
    freshness = json.loads(next(r.observed_value for r in report.results if r.expectation == "freshness"))
    assert freshness["freshness_lag_seconds"] == 600 and freshness["watermark_source"] == "checkpoint"


def _ends_before_start(rows):
    rows[2]["session_end"], rows[2]["session_start"] = rows[2]["session_start"], rows[2]["session_end"]
    rows[2]["closed_at"] = rows[2]["session_end"] + GAP


def _closed_early(rows):
    rows[0]["closed_at"] -= timedelta(minutes=5)


def _null_user(rows):
    rows.append(summary(None, 40, 41))


def _duplicate(rows):
    rows.append(dict(rows[1]))


def _within_the_gap(rows):  # user_a's second session starts 20 minutes after the first ended: they were one
    rows[1] = summary("user_a", 22, 62)


def _no_events(rows):
    rows[2]["event_count"] = 0


@pytest.mark.parametrize(("mutate", "expected"), [
    (_ends_before_start, "summary_span"),
    (_closed_early, "closed_after_gap"),
    (_null_user, "keys_not_null"),
    (_duplicate, "unique_rows"),
    (_within_the_gap, "sessions_apart"),
    (_no_events, "event_count_positive"),
], ids=["ends_before_start", "closed_early", "null_user", "duplicated_row", "within_the_gap", "no_events"])
def test_each_summary_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_summaries(settings, registry, mutate)
    report = validate(settings, registry)
    assert_fails_only(settings, report, SUMMARIES, expected)


def test_summaries_behind_the_source_are_stale(settings, registry):
    make_summaries(settings, registry, watermark_minute=60)  # 60 minutes behind the latest click; allowed: 40
    report = validate(settings, registry)
    assert report.failed() == {"freshness"}, report.render()
