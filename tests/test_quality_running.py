"""Great Expectations on a running_aggregate table: growing totals pass, a total that goes down fails."""

from __future__ import annotations

from datetime import timedelta

from deltalake import write_deltalake

from include.quality import run_quality
from include.quality.suites import RunningTable, quality_tables
from include.storage import delta as delta_store
from tests.support.quality_data import NOW, START, write

TOTALS, CLICKS = "gold/user_running_totals", "silver/clickstream"
CHECKS = {"keys_not_null", "event_count_positive", "values_in_range", "no_future_windows", "unique_rows",
          "freshness", "totals_never_decrease"}


def totals(counts: dict[str, int], minute: int) -> list[dict]:
    return [{"user_id": user, "event_count": n, "total_value": float(n), "last_event_time": START + timedelta(minutes=minute)}
            for user, n in counts.items()]


def overwrite(settings, registry, rows):
    """A new version holding `rows` (as a MERGE of the job leaves the table)."""
    import pyarrow as pa

    schema = delta_store.arrow_schema(registry.table_schemas[TOTALS])
    write_deltalake(str(settings.layout.table(TOTALS)), pa.Table.from_pylist(rows, schema=schema), mode="overwrite")


def test_running_spec_follows_the_registry(registry):
    spec = quality_tables(registry)[TOTALS]
    assert isinstance(spec, RunningTable) and spec.latest_event == "last_event_time"
    assert {c.name for c in spec.checks} == CHECKS and spec.freshness_lag_seconds == 1200


def test_totals_that_grow_pass_and_a_total_that_goes_down_fails(settings, registry):
    write(settings, registry, CLICKS, [{"event_id": "e", "user_id": "a", "event_type": "click", "value": 1.0,
                                        "event_time": START + timedelta(minutes=30), "_source_file": "f",
                                        "_ingested_at": START}])
    write(settings, registry, TOTALS, totals({"a": 2, "b": 1}, 20))
    assert not run_quality(settings, registry, [TOTALS], now=NOW).failed()
    overwrite(settings, registry, totals({"a": 5, "b": 1, "c": 1}, 30))
    assert not run_quality(settings, registry, [TOTALS], now=NOW).failed()  # compared with the version validated

    overwrite(settings, registry, totals({"a": 4, "c": 1}, 30))  # a went down, b vanished
    report = run_quality(settings, registry, [TOTALS], now=NOW)
    assert report.failed() == {"totals_never_decrease"}, report.render()
    observed = next(r.observed_value for r in report.results if r.expectation == "totals_never_decrease")
    assert '"decreased_totals": 2' in observed and '"before": 5, "after": 4' in observed
