"""The frames the expectations run on: gold rows with derived columns, and one row of table metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from include import delta_store
from include.observability import PROGRESS_TABLE
from include.quality.suites import WindowedTable
from include.settings import Settings


def _epoch_seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64()).to_numpy(zero_copy_only=False) // 1_000_000


def row_frame(rows: pa.Table, spec: WindowedTable, now_epoch: int) -> pd.DataFrame:
    """Gold rows plus `_window_seconds`, `_start_offset_seconds`, `_seconds_in_future`."""
    frame = rows.to_pandas()
    starts = _epoch_seconds(rows["window_start"])
    ends = _epoch_seconds(rows["window_end"])
    frame["_window_seconds"] = ends - starts
    frame["_start_offset_seconds"] = starts % spec.slide_seconds
    frame["_seconds_in_future"] = starts - now_epoch
    return frame


def job_watermark(settings: Settings, job_id: str) -> int | None:
    """The watermark (epoch seconds) of the job's latest recorded batch, if any."""
    path = settings.ops_table(PROGRESS_TABLE)
    if not delta_store.table_exists(path):
        return None
    progress = delta_store.read_table(path).select(["job", "batch_id", "progress_time", "watermark"]).to_pylist()
    mine = [p for p in progress if p["job"] == job_id and p["watermark"] is not None]
    if not mine:
        return None
    latest = max(mine, key=lambda p: (p["progress_time"], p["batch_id"]))
    return int(latest["watermark"].timestamp())


def window_counts(event_epochs: np.ndarray, spec: WindowedTable) -> pd.Series:
    """Events per window start (each event counts in every window that contains it)."""
    base = event_epochs - event_epochs % spec.slide_seconds
    starts = np.concatenate([base - j * spec.slide_seconds for j in range(spec.window_seconds // spec.slide_seconds)])
    return pd.Series(starts).value_counts()


def table_metrics(settings: Settings, gold: pa.Table, spec: WindowedTable) -> tuple[pd.DataFrame, dict]:
    """One row of table-level metrics, and the details behind them for the results table."""
    keys = ["window_start", "window_end", *spec.keys]
    duplicates = gold.num_rows - (gold.group_by(keys).aggregate([]).num_rows if gold.num_rows else 0)

    source = delta_store.read_table(settings.table_path(spec.source_table)).select(["event_id", spec.event_time])
    source = source.group_by("event_id").aggregate([(spec.event_time, "min")]) if source.num_rows else source
    event_column = f"{spec.event_time}_min" if source.num_rows else spec.event_time
    events = _epoch_seconds(source[event_column]) if source.num_rows else np.array([], dtype=np.int64)
    latest_event = int(events.max()) if len(events) else None

    watermark = job_watermark(settings, spec.job_id)
    if watermark is None and latest_event is not None:
        watermark = latest_event - spec.watermark_seconds
    gold_starts = _epoch_seconds(gold["window_start"]) if gold.num_rows else np.array([], dtype=np.int64)
    final = gold_starts[gold_starts + spec.window_seconds <= (watermark if watermark is not None else -1)]
    latest_final_end = int(final.max()) + spec.window_seconds if len(final) else None
    if latest_event is None:
        lag = 0
    elif latest_final_end is None:
        lag = latest_event - int(events.min()) if len(events) else 0
    else:
        lag = max(0, latest_event - latest_final_end)

    details = {"duplicate_window_rows": duplicates, "latest_event": latest_event, "watermark": watermark,
               "latest_finalized_window_end": latest_final_end, "freshness_lag_seconds": lag}
    metrics = {"duplicate_window_rows": duplicates, "freshness_lag_seconds": lag}
    if spec.counts and watermark is not None:
        count = spec.counts[0]
        per_row = gold.group_by(keys).aggregate([(count, "max")]) if gold.num_rows else None
        gold_per_window = (
            pd.Series(per_row[f"{count}_max"].to_numpy(zero_copy_only=False),
                      index=_epoch_seconds(per_row["window_start"])).groupby(level=0).sum()
            if per_row is not None else pd.Series(dtype=np.int64)
        )
        source_per_window = window_counts(events, spec) if len(events) else pd.Series(dtype=np.int64)
        compared = pd.concat([gold_per_window.rename("gold"), source_per_window.rename("source")], axis=1).fillna(0)
        compared = compared[compared.index + spec.window_seconds <= watermark]
        mismatched = compared[compared["gold"] != compared["source"]]
        metrics["reconciliation_mismatched_windows"] = len(mismatched)
        details.update(reconciliation_mismatched_windows=len(mismatched), finalized_windows=len(compared),
                       gold_events=int(compared["gold"].sum()), source_events=int(compared["source"].sum()))
    elif spec.counts:
        metrics["reconciliation_mismatched_windows"] = 0
    return pd.DataFrame([metrics]), details
