"""Streaming observability: every batch's progress to `_ops/query_progress`, plus a heartbeat per job."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql.streaming import StreamingQueryListener

from include import delta_store, test_hooks
from include.files import read_json, write_json_atomically
from include.settings import Settings

log = logging.getLogger(__name__)

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
}
STATE_METRICS = ("numRowsTotal", "numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark", "memoryUsedBytes")


def _timestamp(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def progress_row(progress) -> dict:
    """One `_ops/query_progress` row from a StreamingQueryProgress."""
    operators = [{m: getattr(op, m) for m in STATE_METRICS} | {"operator": op.operatorName} for op in progress.stateOperators]
    durations = progress.durationMs or {}
    total = {m: sum(op[m] for op in operators) for m in STATE_METRICS}
    return {
        "job": progress.name,
        "query_id": str(progress.id),
        "run_id": str(progress.runId),
        "batch_id": progress.batchId,
        "progress_time": _timestamp(progress.timestamp),
        "num_input_rows": progress.numInputRows,
        "input_rows_per_second": float(progress.inputRowsPerSecond or 0.0),
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
    }


def write_heartbeat(settings: Settings, job_id: str, **fields) -> Path:
    """Atomically refresh `_ops/heartbeats/<job>.json`."""
    path = settings.heartbeat_dir / f"{job_id}.json"
    write_json_atomically(path, {"job": job_id, "pid": os.getpid(), "updated_at": datetime.now(UTC).isoformat(), **fields})
    return path


def read_heartbeat(settings: Settings, job_id: str) -> dict | None:
    return read_json(settings.heartbeat_dir / f"{job_id}.json")


class ProgressRecorder(StreamingQueryListener):
    """Records each finished batch and refreshes the job's heartbeat; one per SparkSession.

    Queries are named after their job; :meth:`track` tells where a job's records go.
    """

    def __init__(self):
        self._settings: dict[str, Settings] = {}
        self._terminated: set[str] = set()
        self._lock = threading.Condition()

    def track(self, job_id: str, settings: Settings) -> None:
        self._settings[job_id] = settings

    def onQueryStarted(self, event) -> None:
        write_heartbeat(self._settings[event.name], event.name, status="started", query_id=str(event.id), run_id=str(event.runId))

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        try:
            row = progress_row(progress)
            settings = self._settings[progress.name]
            delta_store.append_rows(settings.ops_table(PROGRESS_TABLE), PROGRESS_SCHEMA, [row])
            write_heartbeat(
                settings,
                progress.name,
                status="running",
                query_id=row["query_id"],
                run_id=row["run_id"],
                batch_id=row["batch_id"],
                watermark=row["watermark"],
                num_input_rows=row["num_input_rows"],
                state_rows_total=row["state_rows_total"],
            )
            log.info(
                "job=%s batch=%s input_rows=%s duration_ms=%s watermark=%s state_rows=%s",
                progress.name, progress.batchId, progress.numInputRows, progress.batchDuration,
                row["watermark"], row["state_rows_total"],
            )
        except Exception:
            log.exception("job=%s batch=%s: could not record progress", progress.name, progress.batchId)
        test_hooks.maybe_kill(progress.name, "between_batches", progress.batchId)

    def onQueryIdle(self, event) -> None:
        settings = self._settings[event.name]
        beat = {k: v for k, v in (read_heartbeat(settings, event.name) or {}).items() if k not in ("pid", "updated_at", "job")}
        beat.update(status="idle", query_id=str(event.id), run_id=str(event.runId))
        write_heartbeat(settings, event.name, **beat)

    def onQueryTerminated(self, event) -> None:
        log.info("query %s terminated%s", event.id, f" with {event.exception}" if event.exception else "")
        with self._lock:
            self._terminated.add(str(event.id))
            self._lock.notify_all()

    def wait_terminated(self, query_id: str, timeout: float = 60.0) -> bool:
        """Block until the listener has handled `query_id`'s termination.

        Listener events arrive asynchronously but in order, so every batch of the query has been
        recorded by then; waiting keeps them from racing the process exit.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while query_id not in self._terminated:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True
