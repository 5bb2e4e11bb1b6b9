"""Great Expectations on the session and join gold tables: good data passes, each defect fails its own check.

Small synthetic Delta tables (silver clickstream and payments, the gold rows the streaming jobs would
emit, and the gold job's checkpoint watermark), as in tests/test_quality.py; no Spark except for the
one test of the Spark engine.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

import pytest

from include.quality import run_quality
from include.quality.suites import JoinTable, SessionTable, quality_tables
from include.registry import build_registry, load_registry
from include.settings import load_settings
from tests.support.quality_data import NOW, START, assert_fails_only, recorded, write, write_checkpoint

SESSIONS, SESSIONS_JOB = "gold/user_sessions", "gold_user_sessions"
ORDERS = "gold/order_payments"
CLICKS, PAYMENTS = "silver/clickstream", "silver/payments"
SPEC = quality_tables(load_registry(load_settings().registry_path))[SESSIONS]
GAP = timedelta(seconds=SPEC.gap_seconds)  # the data below works for gaps of 2 to 10 minutes
SESSION_CHECKS = {"session_bounds", "no_future_windows", "keys_not_null", "event_count_positive", "values_in_range",
                  "unique_windows", "freshness", "reconciliation"}
JOIN_CHECKS = {"join_bound", "unmatched_without_right", "no_future_windows", "keys_not_null", "unique_rows",
               "freshness"}
# per user, bursts of one event a minute (first, last minute after START); a session per burst, ending a gap
# after it; the watermark (latest event - 10 minutes) is minute 89
BURSTS = {"user_a": [(0, 19), (40, 59), (90, 99)], "user_b": [(5, 24), (60, 79)]}


def validate(settings, registry, table: str, **kwargs):
    return run_quality(settings, registry, [table], now=NOW, **kwargs)


def observed(report, expectation: str) -> dict:
    return json.loads(next(r.observed_value for r in report.results if r.expectation == expectation))


# -------------------------------------------------------------------------------------------- sessions


def click(event_id: str, user: str | None, minute: float, event_type: str = "click", value: float = 1.0) -> dict:
    return {"event_id": event_id, "user_id": user, "event_type": event_type, "value": value,
            "event_time": START + timedelta(minutes=minute), "_source_file": "f", "_ingested_at": START}


def burst_events(bursts: dict[str, list[tuple[int, int]]], tag: str = "") -> list[dict]:
    return [click(f"{user}-{tag}{m}", user, m) for user, spans in bursts.items()
            for first, last in spans for m in range(first, last + 1)]


def sessions_of(events: list[dict], watermark) -> list[dict]:
    """The finalized sessions of `events` (what the append-mode job emits): a session ends a gap after
    its last event, and takes the next event of its user that comes at or before that end."""
    by_user: dict[str, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["event_time"]):
        by_user[e["user_id"]].append(e)
    sessions = []
    for user, user_events in by_user.items():
        current: list[dict] = []
        for e in user_events + [None]:
            if current and (e is None or e["event_time"] > current[-1]["event_time"] + GAP):
                sessions.append({"session_start": current[0]["event_time"], "session_end": current[-1]["event_time"] + GAP,
                                 "user_id": user, "event_count": len(current),
                                 "total_value": sum(c["value"] for c in current)})
                current = []
            if e is not None:
                current.append(e)
    return sorted((s for s in sessions if s["session_end"] <= watermark), key=lambda s: (s["session_start"], s["user_id"]))


def make_sessions(settings, registry, mutate=None) -> list[dict]:
    """Silver events in bursts, the sessions the job would have emitted, and the job's watermark."""
    events = burst_events(BURSTS)
    watermark = max(e["event_time"] for e in events) - timedelta(minutes=10)  # minute 89
    write(settings, registry, CLICKS, events)
    rows = sessions_of(events, watermark)
    if mutate:
        mutate(rows)
    write(settings, registry, SESSIONS, rows)
    write_checkpoint(settings, SESSIONS_JOB, watermark)
    return rows


def test_session_spec_follows_the_registry(registry):
    spec = quality_tables(registry)[SESSIONS]
    assert isinstance(spec, SessionTable)
    assert (spec.gap_seconds, spec.keys, spec.counts, spec.sums) == (
        300, ("user_id",), ("event_count",), ("total_value",))  # include/jobs.yaml
    assert spec.unique_key == ("session_start", "session_end", "user_id")
    assert {c.name for c in spec.checks} == SESSION_CHECKS
    bounds = next(c for c in spec.checks if c.name == "session_bounds")
    assert (bounds.severity, bounds.scope, bounds.kwargs) == ("blocking", "rows",
                                                              {"column": "session length (s)", "min_value": 300})


def test_good_sessions_pass(settings, registry):
    rows = make_sessions(settings, registry)
    assert [(r["user_id"], r["event_count"]) for r in rows] == [("user_a", 20), ("user_b", 20), ("user_a", 20),
                                                                ("user_b", 20)]
    report = validate(settings, registry, SESSIONS)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == SESSION_CHECKS
    assert {r.table for r in report.results} == {SESSIONS}  # the selection: only this table
    reconciliation = observed(report, "reconciliation")
    assert reconciliation["gold_events"] == reconciliation["source_events"] == 80
    assert reconciliation["finalized_sessions"] == 4 and reconciliation["watermark_source"] == "checkpoint"
    # user_a's last session (minute 90..99) is still open at minute 99: nothing closed is missing
    freshness = observed(report, "freshness")
    assert freshness["freshness_lag_seconds"] == 0 and freshness["earliest_missing_session_end"] is None
    assert freshness["latest_finalized_session_end"] == (START + timedelta(minutes=79) + GAP).isoformat()


def _inverted(rows):
    rows[0]["session_end"] = rows[0]["session_start"] - timedelta(minutes=1)


def _too_short(rows):
    rows[0]["session_end"] = rows[0]["session_start"] + GAP - timedelta(seconds=1)


def _duplicate(rows):
    rows.append(dict(rows[1]))


def _null_user(rows):  # a session past the watermark: no table check looks at it
    start = START + timedelta(minutes=95)
    rows.append({"session_start": start, "session_end": start + GAP, "user_id": None, "event_count": 1,
                 "total_value": 1.0})


def _count_too_high(rows):
    rows[2]["event_count"] += 1


def _count_too_low(rows):
    rows[3]["event_count"] -= 1


def _session_without_events(rows):  # user_b had no events between minutes 25 and 59
    rows.append({**rows[1], "session_start": START + timedelta(minutes=40),
                 "session_end": START + timedelta(minutes=40) + GAP})


@pytest.mark.parametrize(("mutate", "expected"), [
    (_inverted, "session_bounds"),
    (_too_short, "session_bounds"),
    (_duplicate, "unique_windows"),
    (_null_user, "keys_not_null"),
    (_count_too_high, "reconciliation"),
    (_count_too_low, "reconciliation"),
    (_session_without_events, "reconciliation"),
], ids=["end_before_start", "shorter_than_gap", "duplicated_row", "null_user", "count_too_high", "count_too_low",
        "session_without_events"])
def test_each_session_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_sessions(settings, registry, mutate)
    report = validate(settings, registry, SESSIONS)
    assert_fails_only(settings, report, SESSIONS, expected)


def test_session_reconciliation_names_the_session_and_excess(settings, registry):
    make_sessions(settings, registry, lambda rows: (_count_too_low(rows), _session_without_events(rows)))
    report = validate(settings, registry, SESSIONS)
    assert report.failed() == {"reconciliation"}, report.render()
    seen = observed(report, "reconciliation")
    assert seen["unreconciled_sessions"] == 2 and seen["excess_gold_sessions"] == 1
    assert seen["shortfall_events"] == 1 and seen["excess_events"] == 20
    assert seen["unreconciled_sample"] == [
        {"user_id": "user_b", "session_start": (START + timedelta(minutes=60)).isoformat(),
         "session_end": (START + timedelta(minutes=79) + GAP).isoformat(), "gold": 19, "source": 20,
         "late_arrival_candidates": 0},
        {"user_id": "user_b", "session_start": (START + timedelta(minutes=40)).isoformat(),
         "session_end": (START + timedelta(minutes=40) + GAP).isoformat(), "in_no_source_session": True, "gold": 20,
         "source": 0, "late_arrival_candidates": 0}]


def test_session_reconciliation_tolerates_late_arrivals_only(settings, registry):
    """Events silver commits after later ones may have been dropped by the job as late; no others may be."""
    late = burst_events({"user_a": [(37, 39)]}, tag="late")  # joins user_a's 40..59 session in batch
    for root, mutate in (("ok", None), ("short", lambda rows: _count_too_low(rows))):
        lakehouse = replace(settings, root=settings.root / root)
        make_sessions(lakehouse, registry, mutate)
        write(lakehouse, registry, CLICKS, late)
        report = validate(lakehouse, registry, SESSIONS)
        seen = observed(report, "reconciliation")
        assert seen["late_arrival_candidates"] == len(late)
        if mutate is None:  # gold lacks the late events: legitimately dropped; its session lies inside the batch one
            assert not report.failed(), report.render()
            assert seen["shortfall_events"] == len(late) and seen["unreconciled_sessions"] == 0
        else:  # user_b's second session misses an event that was never late
            assert report.failed() == {"reconciliation"}, report.render()
            assert seen["unreconciled_sessions"] == 1


def test_stale_session_table_fails_freshness_only(settings, registry):
    make_sessions(settings, registry)
    assert not validate(settings, registry, SESSIONS).failed()
    # silver moves on two hours later; the gold job (and its watermark) does not
    write(settings, registry, CLICKS, burst_events({"user_a": [(220, 240)]}, tag="later"))
    report = validate(settings, registry, SESSIONS)
    assert report.failed() == {"freshness"}, report.render()
    assert {r.expectation for r in report.results} == {"unique_windows", "freshness", "reconciliation"}
    seen = observed(report, "freshness")
    # user_a's minute 90..99 session closed long ago and is not in the table
    assert seen["earliest_missing_session_end"] == (START + timedelta(minutes=99) + GAP).isoformat()
    assert seen["freshness_lag_seconds"] == (240 - 99) * 60 - SPEC.gap_seconds > seen["allowed_lag_seconds"] == 20 * 60


def test_sessions_of_always_active_keys_are_fresh(settings, registry):
    """A key active without a break has no finalized session: the table is not stale for it."""
    make_sessions(settings, registry)
    write(settings, registry, CLICKS, burst_events({"user_b": [(100, 240)], "user_a": [(100, 240)]}, tag="busy"))
    write_checkpoint(settings, SESSIONS_JOB, START + timedelta(minutes=230))  # the job keeps up
    report = validate(settings, registry, SESSIONS)
    assert not report.failed(), report.render()  # user_a's 90..99 session merged into the open one
    assert observed(report, "freshness")["latest_finalized_session_end"] == (
        START + timedelta(minutes=79) + GAP).isoformat()


# ----------------------------------------------------------------------------------------------- joins


def payment(payment_id: str, order_id: str | None, minute: float, amount: float = 10.0) -> dict:
    return {"payment_id": payment_id, "order_id": order_id, "amount": amount,
            "payment_time": START + timedelta(minutes=minute), "_source_file": "f", "_ingested_at": START}


ORDER_MINUTES = {"o1": 0, "o2": 10, "o3": 20, "o4": 30, "o5": 40}
PAYMENT_MINUTES = {"p1": ("o1", 5), "p2": ("o2", 39), "p3": ("o3", 20), "p5": ("o5", 41), "p5b": ("o5", 71)}


def join_rows() -> list[dict]:
    """The rows the left outer join emits: a paid row per payment within 30 minutes of its order,
    an unpaid row for the orders without one (o4, and o5's p5b is too late to match)."""
    rows = []
    for order, minute in ORDER_MINUTES.items():
        payments = [(p, m) for p, (o, m) in PAYMENT_MINUTES.items() if o == order and minute <= m <= minute + 30]
        base = {"order_id": order, "user_id": "user_a", "order_time": START + timedelta(minutes=minute),
                "order_value": 10.0}
        rows += [{**base, "payment_id": p, "payment_time": START + timedelta(minutes=m), "amount": 10.0, "paid": True}
                 for p, m in payments]
        if not payments:
            rows.append({**base, "payment_id": None, "payment_time": None, "amount": None, "paid": False})
    return rows


def make_join(settings, registry, mutate=None) -> list[dict]:
    """Purchases (and, three hours later, clicks only), payments, and the joined rows."""
    events = [click(order, "user_a", minute, event_type="purchase", value=10.0) for order, minute in ORDER_MINUTES.items()]
    events += [click(f"c{i}", "user_b", 180 + i) for i in range(5)]  # not purchases: not the join's left side
    write(settings, registry, CLICKS, events)
    write(settings, registry, PAYMENTS, [payment(p, o, m) for p, (o, m) in PAYMENT_MINUTES.items()])
    rows = join_rows()
    if mutate:
        mutate(rows)
    write(settings, registry, ORDERS, rows)
    return rows


def test_join_spec_follows_the_registry(registry):
    spec = quality_tables(registry)[ORDERS]
    assert isinstance(spec, JoinTable)
    assert (spec.left_time, spec.right_time, spec.left_key, spec.right_key, spec.matched) == (
        "order_time", "payment_time", "order_id", "payment_id", "paid")
    assert spec.right_columns == ("payment_id", "payment_time", "amount")
    assert (spec.within_seconds, spec.where, spec.unique_key) == (1800, "event_type = 'purchase'",
                                                                  ("order_id", "payment_id"))
    assert {c.name for c in spec.checks} == JOIN_CHECKS
    assert {c.column for c in spec.checks if c.name == "keys_not_null"} == {"order_id", "paid"}


def test_good_join_passes(settings, registry):
    rows = make_join(settings, registry)
    assert [(r["order_id"], r["payment_id"]) for r in rows] == [("o1", "p1"), ("o2", "p2"), ("o3", "p3"),
                                                                ("o4", None), ("o5", "p5")]
    report = validate(settings, registry, ORDERS)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == JOIN_CHECKS
    assert "keys_not_null(order_id)" in report.render() and "keys_not_null(paid)" in report.render()
    bound = observed(report, "join_bound")
    assert bound["unexpected_count"] == 0  # unpaid rows are not counted
    freshness = observed(report, "freshness")  # against the latest purchase, not the later clicks
    assert freshness["latest_event_time"] == (START + timedelta(minutes=40)).isoformat()
    assert freshness["freshness_lag_seconds"] == 0 and freshness["source"] == f"{CLICKS} where event_type = 'purchase'"


def _paid_late(rows):
    rows[1]["payment_time"] = rows[1]["order_time"] + timedelta(minutes=30, seconds=1)


def _paid_before_order(rows):
    rows[2]["payment_time"] = rows[2]["order_time"] - timedelta(minutes=2)


def _paid_without_time(rows):
    rows[0]["payment_time"] = None


def _unpaid_with_payment(rows):
    rows[3].update(payment_id="p9", payment_time=rows[3]["order_time"] + timedelta(minutes=1))


def _unpaid_with_amount(rows):
    rows[3]["amount"] = 3.0


def _null_order(rows):
    rows[4]["order_id"] = None


def _null_paid(rows):
    rows[4]["paid"] = None


def _duplicate_payment(rows):
    rows.append(dict(rows[0]))


def _future_order(rows):
    rows.append({**rows[3], "order_id": "o9", "order_time": NOW + timedelta(hours=1)})


@pytest.mark.parametrize(("mutate", "expected"), [
    (_paid_late, "join_bound"),
    (_paid_before_order, "join_bound"),
    (_paid_without_time, "join_bound"),
    (_unpaid_with_payment, "unmatched_without_right"),
    (_unpaid_with_amount, "unmatched_without_right"),
    (_null_order, "keys_not_null"),
    (_null_paid, "keys_not_null"),
    (_duplicate_payment, "unique_rows"),
    (_future_order, "no_future_windows"),
], ids=["paid_after_bound", "paid_before_order", "paid_without_time", "unpaid_with_payment", "unpaid_with_amount",
        "null_order_id", "null_paid", "duplicated_row", "future_order"])
def test_each_join_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_join(settings, registry, mutate)
    report = validate(settings, registry, ORDERS)
    assert_fails_only(settings, report, ORDERS, expected)


def test_join_bound_reports_the_offending_offsets(settings, registry):
    make_join(settings, registry, lambda rows: (_paid_late(rows), _paid_before_order(rows)))
    report = validate(settings, registry, ORDERS)
    bound = observed(report, "join_bound")
    assert bound["unexpected_count"] == 2 and sorted(bound["unexpected_sample"]) == [-120.0, 1801.0]
    assert bound["unexpected_percent"] == pytest.approx(100 * 2 / 4)  # of the 4 paid rows


def test_stale_join_table_fails_freshness(settings, registry):
    make_join(settings, registry)
    write(settings, registry, CLICKS, [click("o20", "user_a", 200, event_type="purchase")])
    report = validate(settings, registry, ORDERS)
    assert report.failed() == {"freshness"}, report.render()
    assert observed(report, "freshness")["freshness_lag_seconds"] == 160 * 60


# ------------------------------------------------------------------------------------ selection, config


def test_selection_validates_only_the_named_tables(settings, registry):
    make_sessions(settings, registry)
    write(settings, registry, ORDERS, join_rows())
    report = run_quality(settings, registry, [SESSIONS], now=NOW)  # `lakehouse quality run gold/user_sessions`
    assert not report.failed(), report.render()
    assert {r.table for r in report.results} == {SESSIONS}
    assert {r["table"] for r in recorded(settings, report.run_id)} == {SESSIONS}
    everything = run_quality(settings, registry, now=NOW)
    assert {r.table for r in everything.results} == {SESSIONS, ORDERS}
    assert "gold/user_activity_5m: no Delta table" in everything.render()  # every table with a suite is looked at
    assert {r.table for r in everything.results if r.expectation == "join_bound"} == {ORDERS}
    with pytest.raises(ValueError, match="not a gold table with a quality suite: silver/payments"):
        run_quality(settings, registry, ["silver/payments"])


def test_default_freshness_lag_and_severity_overrides(raw):
    raw = copy.deepcopy(raw)
    raw["jobs"][SESSIONS_JOB]["quality"] = {"severity": {"session_bounds": "warning"}}
    raw["jobs"]["gold_order_payments"].pop("quality", None)
    specs = quality_tables(build_registry(raw))
    assert specs[SESSIONS].freshness_lag_seconds == 600 + SPEC.gap_seconds  # watermark + gap
    assert specs[ORDERS].freshness_lag_seconds == 600 + 1800  # watermark + within
    assert {c.name: c.severity for c in specs[SESSIONS].checks}["session_bounds"] == "warning"


@pytest.mark.spark
def test_spark_engine_gives_the_same_verdicts(spark, settings, registry):
    for root, make, table, mutate, expected in (
        ("sessions", make_sessions, SESSIONS, _inverted, {"session_bounds"}),
        ("joins", make_join, ORDERS, lambda rows: (_paid_late(rows), _unpaid_with_payment(rows)),
         {"join_bound", "unmatched_without_right"}),
    ):
        lakehouse = replace(settings, root=settings.root / root, dq_spark_threshold_rows=0)
        make(lakehouse, registry, mutate)
        report = validate(lakehouse, registry, table)
        assert report.failed() == expected, report.render()
        engines = {r["expectation"]: r["engine"] for r in recorded(lakehouse, report.run_id)}
        assert {engines[e] for e in expected} == {"spark"}
