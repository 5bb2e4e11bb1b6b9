"""Great Expectations on the windowed gold tables: good data passes, each defect fails its own check.

The real pipeline's output passes (tests/test_demo.py); defects are injected into small synthetic Delta tables
(silver events for an hour, the 5-minute gold table the stream would emit, and the gold job's
checkpoint watermark) to keep the suite fast.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from include.quality import gx_context, run_quality
from include.quality.suites import quality_tables
from include.registry import build_registry
from tests.support.helpers import problems_of, run_cli
from tests.support.quality_data import (
    GOLD,
    JOB,
    NOW,
    SILVER,
    START,
    assert_fails_only,
    make_tables,
    recorded,
    silver_events,
    write,
)

ALL_CHECKS = {"window_size", "window_aligned", "no_future_windows", "keys_not_null", "event_count_positive",
              "values_in_range", "unique_windows", "freshness", "reconciliation"}


# ---------------------------------------------------------------------------------------------- data


def new_window(user: str | None = "user_a", **values) -> dict:
    """A gold row for 01:00-01:05, past the watermark: no table check looks at it."""
    start = START + timedelta(hours=1)
    return {"window_start": start, "window_end": start + timedelta(minutes=5), "user_id": user,
            "event_count": 1, "total_value": 1.0, **values}


def validate(settings, registry, **kwargs):
    return run_quality(settings, registry, [GOLD], now=NOW, **kwargs)


@pytest.fixture
def synthetic(settings, registry):
    return make_tables(settings, registry)


# ---------------------------------------------------------------------------------------------- tests


def test_synthetic_good_data_passes(settings, registry, synthetic):
    report = validate(settings, registry)
    assert not report.failed(), report.render()
    assert {r.expectation for r in report.results} == ALL_CHECKS
    page = report.report_page()  # one table: its own validation result
    assert page.startswith("validations/gold__user_activity_5m__rows/") and (settings.layout.data_docs / page).is_file()


def _duplicate(rows):
    rows.append(dict(rows[3]))


def _wrong_bounds(rows):
    rows[2]["window_end"] = rows[2]["window_start"] + timedelta(minutes=6)


def _null_key(rows):
    rows[4]["user_id"] = None


def _count_too_high(rows):
    rows[5]["event_count"] += 1


def _count_too_low(rows):
    rows[6]["event_count"] -= 1


def _future_window(rows):
    rows.append(new_window(window_start=NOW + timedelta(hours=1), window_end=NOW + timedelta(hours=1, minutes=5)))


@pytest.mark.parametrize(("mutate", "expected"), [
    (_duplicate, "unique_windows"),
    (_wrong_bounds, "window_size"),
    (_null_key, "keys_not_null"),
    (_count_too_high, "reconciliation"),
    (_count_too_low, "reconciliation"),
    (_future_window, "no_future_windows"),
], ids=["duplicated_row", "wrong_bounds", "null_key", "count_too_high", "count_too_low", "future_window"])
def test_each_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_tables(settings, registry, mutate)
    report = validate(settings, registry)
    assert_fails_only(settings, report, GOLD, expected)


def test_reconciliation_tolerates_late_arrivals_only(settings, registry):
    """Events silver commits after later ones may have been dropped by gold as late; no others may be missing."""
    late = silver_events(5, tag="late")  # 00:00-00:05 again (new event ids), after events up to 00:59:30
    for root, mutate in (("ok", None), ("short", _first_window_one_less)):
        lakehouse = replace(settings, root=settings.root / root)
        make_tables(lakehouse, registry, mutate)
        write(lakehouse, registry, SILVER, late)
        report = validate(lakehouse, registry)
        observed = json.loads(next(r.observed_value for r in report.results if r.expectation == "reconciliation"))
        assert observed["late_arrival_candidates"] == len(late)
        if mutate is None:  # gold lacks the late events: legitimately dropped as late
            assert not report.failed(), report.render()
            assert observed["shortfall_events"] == len(late) and observed["unreconciled_windows"] == 0
        else:  # one event more is missing from the window than could have arrived late
            assert report.failed() == {"reconciliation"}, report.render()
            assert observed["unreconciled_sample"] == [{"window_start": START.isoformat(), "gold": 19,
                                                        "source": 40, "late_arrival_candidates": 20}]


def _first_window_one_less(rows):
    rows[0]["event_count"] -= 1


def test_stale_table_fails_freshness_only(settings, registry, synthetic):
    assert not validate(settings, registry).failed()
    # silver moves on two hours later; the gold job (and its watermark) does not
    write(settings, registry, SILVER, silver_events(30, offset=timedelta(hours=2), tag="later"))
    report = validate(settings, registry)  # incremental, and gold has no new version: table checks still run
    assert report.failed() == {"freshness"}, report.render()
    assert {r.expectation for r in report.results} == {"unique_windows", "freshness", "reconciliation"}
    observed = json.loads(next(r.observed_value for r in report.results if r.expectation == "freshness"))
    assert observed["freshness_lag_seconds"] > observed["allowed_lag_seconds"] == 20 * 60
    assert {r["expectation"] for r in recorded(settings, report.run_id) if not r["success"]} == {"freshness"}


def test_incremental_validates_only_new_versions_and_full_everything(settings, registry, synthetic):
    first = validate(settings, registry)
    row_checks = [r for r in recorded(settings, first.run_id) if r["expectation"] == "window_size"]
    assert [(r["version_from"], r["version_to"], r["rows_validated"]) for r in row_checks] == [(0, 1, len(synthetic))]

    again = validate(settings, registry)
    assert {r.expectation for r in again.results} == {"unique_windows", "freshness", "reconciliation"}
    assert "row checks skipped" in again.render()

    write(settings, registry, GOLD, [new_window(user=None)])
    incremental = validate(settings, registry)
    assert incremental.failed() == {"keys_not_null"}
    rows = recorded(settings, incremental.run_id)
    assert {(r["version_from"], r["version_to"], r["rows_validated"]) for r in rows if r["expectation"] == "keys_not_null"} == {(2, 2, 1)}
    assert {(r["version_from"], r["version_to"]) for r in rows if r["expectation"] == "unique_windows"} == {(0, 2)}

    assert validate(settings, registry).failed() == set()  # that version is validated; its failure stays recorded
    full = validate(settings, registry, full=True)
    assert full.failed() == {"keys_not_null"}
    assert {r["rows_validated"] for r in recorded(settings, full.run_id) if r["expectation"] == "keys_not_null"} == {
        len(synthetic) + 1}

    # the GE validation store (the report's history) is bounded
    store = settings.layout.gx_project / "gx" / "validations"
    assert len(list((store / "gold__user_activity_5m__table").glob("*/*/*.json"))) == 5
    assert gx_context.prune_validations(settings, keep=2) == 3 + 1  # table suite: 5 -> 2, rows suite: 3 -> 2
    assert {s.name: len(list(s.glob("*/*/*.json"))) for s in store.iterdir() if s.is_dir()} == {
        "gold__user_activity_5m__table": 2, "gold__user_activity_5m__rows": 2}


def test_the_data_docs_compile_their_templates_once_per_process(settings, registry, synthetic):
    """GE builds new Jinja environments for every Data Docs build; its views here share the compiled templates
    (include/quality/docs_views.py): a second run renders its pages with no template compiled again."""
    from include.quality.docs_views import COMPILED_TEMPLATES

    validate(settings, registry)
    compiled, reused = COMPILED_TEMPLATES.compiled, COMPILED_TEMPLATES.reused
    assert compiled > 0
    again = validate(settings, registry, full=True)
    assert (COMPILED_TEMPLATES.compiled, COMPILED_TEMPLATES.reused > reused) == (compiled, True)
    page = (settings.layout.data_docs / again.report_page()).read_text()
    assert again.run_id in page and "window_size" in page and "Succeeded" in page


@pytest.mark.spark
def test_spark_engine_above_the_threshold(spark, settings, registry, synthetic):
    validate(settings, registry)
    write(settings, registry, GOLD, [new_window(window_end=START + timedelta(hours=1, minutes=7))])
    report = validate(replace(settings, dq_spark_threshold_rows=0), registry)
    assert report.failed() == {"window_size"}, report.render()
    engines = {r["expectation"]: r["engine"] for r in recorded(settings, report.run_id)}
    assert engines["window_size"] == "spark" and engines["reconciliation"] == "pandas"


def test_cli_exit_codes_and_output(settings, registry, synthetic, lakehouse_env):
    good = run_cli(["quality", "run", GOLD], lakehouse_env, timeout=300)
    assert good.returncode == 0, good.stderr[-3000:]
    assert "outcome: passed" in good.stdout
    assert " INFO " not in good.stderr and "..." not in good.stdout  # the report alone, values whole
    assert f"report: {settings.layout.data_docs / 'index.html'}" in good.stdout
    assert (settings.layout.data_docs / "index.html").exists()

    write(settings, registry, GOLD, [new_window(total_value=-5.0)])
    warned = run_cli(["quality", "run"], lakehouse_env, timeout=300)  # a warning does not fail the run
    assert warned.returncode == 0, warned.stdout + warned.stderr[-3000:]
    assert re.search(rf"warn +{GOLD} +values_in_range ", warned.stdout) and "1 warnings" in warned.stdout

    write(settings, registry, GOLD, [new_window(user="user_b", event_count=0)])
    bad = run_cli(["quality", "run", GOLD], lakehouse_env, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr[-3000:]
    assert re.search(rf"FAIL +{GOLD} +event_count_positive ", bad.stdout), bad.stdout
    assert f"outcome: FAILED (1 blocking: {GOLD} event_count_positive)" in bad.stdout

    unknown = run_cli(["quality", "run", "gold/nope"], lakehouse_env, timeout=300)
    assert unknown.returncode == 2 and "not a gold table with a quality suite: gold/nope" in unknown.stderr


# ------------------------------------------------------------------------------------ registry section


def test_quality_section_configures_the_suite(raw):
    raw = copy.deepcopy(raw)
    raw["jobs"][JOB]["quality"] = {"freshness_lag": "20 minutes", "severity": {"freshness": "warning"}}
    del raw["jobs"]["gold_user_activity_1h"]["quality"]
    specs = quality_tables(build_registry(raw))
    assert specs[GOLD].freshness_lag_seconds == 1200
    assert {c.name: c.severity for c in specs[GOLD].checks}["freshness"] == "warning"
    assert specs["gold/user_activity_1h"].freshness_lag_seconds == 600 + 300  # default: watermark + slide


@pytest.mark.parametrize(("job", "section", "problem"), [
    (JOB, {"freshness_lag": "soon"}, f"job '{JOB}': quality.freshness_lag: bad duration 'soon'"),
    (JOB, {"freshness_lag": "0 minutes"}, f"job '{JOB}': quality.freshness_lag: must be positive"),
    (JOB, {"severity": {"window_sise": "warning"}}, f"job '{JOB}': quality.severity.window_sise: unknown expectation"),
    (JOB, {"severity": {"freshness": "fatal"}},
     f"job '{JOB}': quality.severity.freshness: must be blocking or warning, got 'fatal'"),
    (JOB, {"severity": ["freshness"]}, f"job '{JOB}': quality.severity: must map expectation names"),
    (JOB, {"lag": "1 hour"}, f"job '{JOB}': quality: unknown fields ['lag']"),
    (JOB, "strict", f"job '{JOB}': quality: must be a mapping"),
    ("bronze_clickstream", {"freshness_lag": "1 hour"},
     "job 'bronze_clickstream': quality.freshness_lag: a parse_json (bronze) table's suite has no freshness check"),
    ("silver_clickstream", {"freshness_lag": "1 hour"},
     "job 'silver_clickstream': quality: only parse_json, window_aggregate, session_aggregate, stream_join, running_aggregate, apply_changes "
     "jobs and "
     "stateful_process jobs of a processor with a suite have quality suites"),
])
def test_quality_section_errors_name_job_and_field(raw, job, section, problem):
    raw = copy.deepcopy(raw)
    raw["jobs"][job]["quality"] = section
    problems = problems_of(raw)
    assert any(p.startswith(problem) for p in problems), problems
