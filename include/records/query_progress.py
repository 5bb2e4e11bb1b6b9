"""Streaming progress records: one `_ops/query_progress` row per micro-batch (schema and row builder).

The listener that writes them runs inside the job (`spark_jobs.progress_listener`); readers (health, summary)
use the table name and schema from here without importing pyspark.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from include.registry.durations import ON_UPSTREAM_COMMIT

PROGRESS_TABLE = "query_progress"
PROGRESS_SCHEMA: dict[str, str] = {
    "job": "string",
    "query_id": "string",
    "run_id": "string",
    "batch_id": "long",
    "progress_time": "timestamp",
    "num_input_rows": "long",
    "input_rows_per_second": "double",
    "processed_rows_per_second": "double",
    "batch_duration_ms": "long",
    "trigger_execution_ms": "long",
    "add_batch_ms": "long",
    "watermark": "timestamp",
    "state_rows_total": "long",
    "state_rows_updated": "long",
    "state_rows_removed": "long",
    "state_rows_dropped_by_watermark": "long",
    "state_memory_used_bytes": "long",
    "state_operators": "string",
    "trigger": "string",  # the run's trigger, as the registry writes it (added later: may be null)
}
STATE_METRICS = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark", "memoryUsedBytes")


def input_rate(progress, trigger: str | None, previous_start: str | None) -> float:
    """The batch's input rows per second (see :func:`progress_row`)."""
    if trigger != ON_UPSTREAM_COMMIT:
        return float(progress.inputRowsPerSecond or 0.0)
    start, previous = _timestamp(progress.timestamp), _timestamp(previous_start)
    seconds = (start - previous).total_seconds() if start and previous else 0.0
    return progress.numInputRows / seconds if seconds > 0 else 0.0


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def progress_row(progress, trigger: str | None = None, previous_start: str | None = None) -> dict:
    """One `_ops/query_progress` row from a StreamingQueryProgress of a run with `trigger`.

    The input rate of a run on its upstream's commits is its rows over the time since its previous batch started
    (`previous_start`, Spark's timestamp of it; 0 for a run's first batch): Spark's divides them by the time since
    its last trigger, which there is the second-long poll before the batch."""
    operators = [{m: getattr(op, m) for m in STATE_METRICS} | {
        "operator": op.operatorName, "commitTimeMs": op.commitTimeMs,
        # what the state store's commit did (RocksDB: flush, checkpoint, files and bytes copied to the checkpoint)
        "rocksdb": {k: v for k, v in sorted((op.customMetrics or {}).items()) if k.startswith("rocksdb")},
    } for op in progress.stateOperators]
    durations = progress.durationMs or {}
    total = {m: sum(op[m] for op in operators) for m in STATE_METRICS}
    return {
        "job": progress.name,
        "query_id": str(progress.id),
        "run_id": str(progress.runId),
        "batch_id": progress.batchId,
        "progress_time": _timestamp(progress.timestamp),
        "num_input_rows": progress.numInputRows,
        "input_rows_per_second": input_rate(progress, trigger, previous_start),
        "processed_rows_per_second": float(progress.processedRowsPerSecond or 0.0),
        "batch_duration_ms": progress.batchDuration,
        "trigger_execution_ms": durations.get("triggerExecution"),
        "add_batch_ms": durations.get("addBatch"),
        "watermark": _timestamp((progress.eventTime or {}).get("watermark")),
        "state_rows_total": total["numRowsTotal"],
        "state_rows_updated": total["numRowsUpdated"],
        "state_rows_removed": total["numRowsRemoved"],
        "state_rows_dropped_by_watermark": total["numRowsDroppedByWatermark"],
        "state_memory_used_bytes": total["memoryUsedBytes"],
        "state_operators": json.dumps(operators),
        "trigger": trigger,
    }
