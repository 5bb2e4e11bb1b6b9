"""Table-level metrics of a windowed gold table: duplicates, freshness, reconciliation with its source.

They need the whole table (a new row can duplicate an old one; reconciliation and freshness compare
all finalized windows with the source), so they are computed on every run from the latest version,
with Arrow/pandas over the projected columns, whatever engine the row checks use. The result is one
row of metrics (what the Great Expectations table suite asserts on) plus the observed details.

Finalized windows are those ending at or before the gold job's watermark, read from its checkpoint
(the offset log entry of its latest committed batch). Without a checkpoint (tables written by other
means), the watermark is taken as the latest source event minus the job's watermark delay, i.e. as
if the job had caught up.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from include import checkpoints, delta_store
from include.quality.reconciliation import MICROS, SourceEvents, read_source_events, reconcile
from include.quality.suites import WindowedTable
from include.settings import Settings

log = logging.getLogger(__name__)


def _iso(micros: int | None) -> str | None:
    return None if micros is None else datetime.fromtimestamp(micros / MICROS, UTC).isoformat()


def gold_watermark(settings: Settings, spec: WindowedTable, source: SourceEvents) -> tuple[int | None, str]:
    """The gold job's watermark (epoch µs) and where it came from."""
    committed = checkpoints.committed_watermark_ms(settings.checkpoint_dir(spec.job_id))
    if committed is not None:
        return committed * 1000, "checkpoint"
    if source.latest is None:
        return None, "none (no checkpoint, no source events)"
    return source.latest - spec.watermark_seconds * MICROS, "latest source event - watermark delay (no checkpoint)"


def table_metrics(settings: Settings, spec: WindowedTable,
                  version: int) -> tuple[dict[str, int], dict[str, dict[str, Any]]]:
    """One row of metrics (column -> value) and, per check name, the observed details behind it."""
    keys = ["window_start", "window_end", *spec.keys]
    gold = delta_store.read_table(settings.table_path(spec.table), version=version, columns=[*keys, *spec.counts])
    distinct = gold.group_by(keys).aggregate([]).num_rows if gold.num_rows else 0
    duplicates = gold.num_rows - distinct

    source = read_source_events(settings.table_path(spec.source_table), spec.event_time)
    watermark, watermark_source = gold_watermark(settings, spec, source)
    ends = pc.cast(pc.cast(gold["window_end"], pa.timestamp("us", tz="UTC")), pa.int64())
    if spec.mode == "update" and watermark is not None:  # rows past the watermark may still change
        ends = ends.filter(pc.less_equal(ends, watermark))
    elif spec.mode == "update":
        ends = ends.slice(0, 0)
    latest_end = pc.max(ends).as_py() if len(ends) else None
    if source.latest is None:
        lag = 0  # nothing to be fresh about
    else:
        lag = (source.latest - (latest_end if latest_end is not None else source.earliest)) // MICROS
        lag = max(0, lag)

    metrics = {"duplicate_window_rows": duplicates, "freshness_lag_seconds": lag}
    details: dict[str, dict[str, Any]] = {
        "unique_windows": {"duplicate_window_rows": duplicates, "rows": gold.num_rows, "distinct_windows": distinct},
        "freshness": {"freshness_lag_seconds": lag, "allowed_lag_seconds": spec.freshness_lag_seconds,
                      "latest_finalized_window_end": _iso(latest_end),
                      f"latest_{spec.event_time}": _iso(source.latest)},
    }
    if spec.counts:
        reconciled = (reconcile(gold, spec, source, watermark) if watermark is not None
                      else {"unreconciled_windows": 0, "finalized_windows": 0})
        metrics["unreconciled_windows"] = reconciled["unreconciled_windows"]
        details["reconciliation"] = {**reconciled, "watermark": _iso(watermark), "watermark_source": watermark_source}
    return metrics, details
