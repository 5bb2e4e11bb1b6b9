"""The console reports line up and show whole values (no Spark, no Airflow)."""

from __future__ import annotations

import json
import re

import pytest

from include.quality.runner import QualityReport
from include.records.quality_results import CheckResult
from include.summary import LakehouseSummary, TableSummary


def test_summary_columns_line_up():
    summary = LakehouseSummary(
        tables=[TableSummary("bronze/clickstream", "/l/bronze/clickstream", 1200, 3, "bronze_clickstream"),
                TableSummary("gold/user_sessions", "/l/gold/user_sessions", 7, None, "gold_user_sessions"),
                TableSummary("x", "/l/x", 0, 0, "-")],
        state_rows={}, quarantine_reasons={}, quality={}, docs_index="/l/_reports/data_docs/index.html")
    rows = [[(m.start(), m.end()) for m in re.finditer(r"\S+", line)] for line in summary.render().splitlines()[:4]]
    assert all(len(cells) == 5 for cells in rows), rows  # table, rows, version, writer, location
    for column, right_aligned in enumerate((False, True, True, False, False)):
        assert len({cells[column][1 if right_aligned else 0] for cells in rows}) == 1, (column, summary.render())


def test_quality_report_names_each_column_of_a_repeated_check_and_keeps_values_whole():
    long_sample = [f"order-{n:04d}-" + "x" * 40 for n in range(5)]

    def result(expectation: str, observed: dict, success: bool = True) -> CheckResult:
        return CheckResult("gold/order_payments", expectation, "blocking", success, json.dumps(observed), "rows",
                           0, 1, 10, "pandas")

    report = QualityReport(run_id="r1", docs_index="/docs/index.html", results=[
        result("keys_not_null", {"column": "order_id", "unexpected_count": 0}),
        result("keys_not_null", {"column": "paid", "unexpected_count": 5, "unexpected_sample": long_sample}, False),
        result("unique_rows", {"column": "_duplicates", "unexpected_count": 0}),
    ])
    text = report.render()
    assert "keys_not_null(order_id)" in text and "keys_not_null(paid)" in text
    assert "unique_rows(" not in text  # one column only: the plain name
    assert all(sample in text for sample in long_sample) and "..." not in text
    assert "FAILED (1 blocking: gold/order_payments keys_not_null(paid))" in text


def test_a_python_worker_start_timeout_says_what_to_do():
    from spark_jobs.run_result import failure_hint

    error = ("org.apache.spark.SparkException: Job aborted due to stage failure: ... "
             "org.apache.spark.SparkException: Python worker failed to connect back.\n\tat ...")
    hint = failure_hint("gold_user_sessions", error)
    assert hint.startswith("job=gold_user_sessions:") and "lakehouse_spark" in hint and "clear the task" in hint
    assert failure_hint("gold_user_sessions", "AnalysisException: cannot resolve column") is None


def test_demo_names_the_run_in_the_ui_only_when_airflow_answers(monkeypatch):
    import http.server
    import threading

    from include.airflow.run_follower import ui_run_url

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's API
            self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AIRFLOW__API__BASE_URL", f"http://127.0.0.1:{server.server_port}")
        assert ui_run_url("lakehouse_backfill", "manual__1") == (
            f"http://127.0.0.1:{server.server_port}/dags/lakehouse_backfill/runs/manual__1")
    finally:
        server.shutdown()
    assert ui_run_url("lakehouse_backfill", "manual__1") is None  # nothing answers there any more


def test_health_of_a_lakehouse_where_nothing_ran_says_not_run_yet(settings, lakehouse_env, registry):
    from tests.support.helpers import run_cli

    result = run_cli(["health", "--report"], lakehouse_env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["job", "batches", "status", "problems"]
    for job_id, line in zip(registry.order, lines[1:], strict=False):
        assert line.split()[:4] == [job_id, "0", "not", "run"], line
    assert lines[-1] == f"pipeline-health report: {settings.layout.health_report_index}"
    page = settings.layout.health_report_index.read_text()
    assert "problems: none" not in page and page.count("not run yet") >= len(registry.order)
    assert json.loads((settings.layout.health_report / "health.json").read_text())["bronze_clickstream"] == {
        "batches": 0, "status": "not run yet", "problems": [], "charts": {}}


def test_an_operational_table_gains_the_columns_the_project_added(tmp_path):
    """`_ops` tables made by an older version (no `trigger` in query_progress) take the new rows; old rows read
    null there. Any other difference is still refused."""
    from include.records.query_progress import PROGRESS_SCHEMA
    from include.storage import delta as delta_store

    path = tmp_path / "query_progress"
    older = {k: v for k, v in PROGRESS_SCHEMA.items() if k != "trigger"}
    delta_store.append_rows(path, older, [{"job": "a", "batch_id": 0}])
    delta_store.append_rows(path, PROGRESS_SCHEMA, [{"job": "a", "batch_id": 1, "trigger": "available-now"}])
    rows = sorted(delta_store.read_table(path).to_pylist(), key=lambda r: r["batch_id"])
    assert [(r["batch_id"], r["trigger"]) for r in rows] == [(0, None), (1, "available-now")]
    with pytest.raises(ValueError, match="has columns"):
        delta_store.append_rows(path, {"job": "string", "other": "long"}, [{"job": "b", "other": 1}])
