"""The job's StreamingQueryListener: records every batch in `_ops/query_progress` and refreshes the heartbeat."""

from __future__ import annotations

import json
import logging
import threading
import time

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from include.records.heartbeats import read_heartbeat, write_heartbeat
from include.records.query_progress import PROGRESS_SCHEMA, PROGRESS_TABLE, progress_row
from include.settings import Settings
from include.storage import delta as delta_store
from spark_jobs import batch_hooks

log = logging.getLogger(__name__)
_RECORDERS: dict[int, ProgressRecorder] = {}


def recorder_for(spark: SparkSession) -> ProgressRecorder:
    """The session's progress listener, added once."""
    key = id(spark)
    if key not in _RECORDERS:
        _RECORDERS[key] = ProgressRecorder()
        add_listener(spark, _RECORDERS[key])
    return _RECORDERS[key]


def add_listener(spark: SparkSession, listener: StreamingQueryListener):
    """Register `listener` so that it receives each event decoded from the event's JSON; returns the Java listener.

    `spark.streams.addListener` hands events over as Java objects that PySpark walks through py4j:
    every map and list costs round trips, and every iterator's end is a Java exception whose
    conversion resolves classes by name (a scan of the class path). Measured live, that made the
    listener thread a tenth of the driver's CPU; one `json()` call per event costs one round trip.
    """
    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)
    bridge = context._jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(_JsonEvents(listener))
    spark._jsparkSession.streams().addListener(bridge)
    return bridge


def progress_event(text: str) -> QueryProgressEvent:
    """PySpark's progress event from the JSON of Spark's."""
    event = json.loads(text)
    for source in event["progress"]["sources"]:
        # Spark's JSON leaves out a rate that is NaN or infinite; PySpark's decoder requires the keys
        for rate in ("inputRowsPerSecond", "processedRowsPerSecond"):
            source.setdefault(rate, float("nan"))
    return QueryProgressEvent.fromJson(event)


class _JsonEvents:
    """py4j callback object: Spark's listener interface for Python, forwarding events decoded from JSON."""

    def __init__(self, listener: StreamingQueryListener):
        self._listener = listener

    def onQueryStarted(self, jevent) -> None:
        self._listener.onQueryStarted(QueryStartedEvent.fromJson(json.loads(jevent.json())))

    def onQueryProgress(self, jevent) -> None:
        self._listener.onQueryProgress(progress_event(jevent.json()))

    def onQueryIdle(self, jevent) -> None:
        self._listener.onQueryIdle(QueryIdleEvent.fromJson(json.loads(jevent.json())))

    def onQueryTerminated(self, jevent) -> None:
        self._listener.onQueryTerminated(QueryTerminatedEvent.fromJson(json.loads(jevent.json())))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressRecorder(StreamingQueryListener):
    """Records each finished batch and refreshes the job's heartbeat; one per SparkSession.

    Queries are named after their job; :meth:`track` tells where a job's records go.
    """

    def __init__(self):
        self._settings: dict[str, Settings] = {}
        self._jobs: dict[str, str] = {}  # query id -> job: idle events carry no query name
        self._triggers: dict[str, str | None] = {}  # job -> its run's trigger, recorded with each batch
        self._memory: dict[str, int | None] = {}  # job -> the memory its state lives in (the health check's measure)
        self._metrics_urls: dict[str, str | None] = {}  # job -> where its driver serves Spark's Prometheus metrics
        self._terminated: set[str] = set()  # run ids: a query id comes back with every run of its checkpoint
        self._totals: dict[str, list[int]] = {}  # run id -> [batches, input rows]
        self._batch_starts: dict[str, str] = {}  # run id -> its last batch's start (Spark's progress timestamp)
        self._lock = threading.Condition()

    def track(self, job_id: str, settings: Settings, trigger: str | None = None, memory_bytes: int | None = None,
              metrics_url: str | None = None) -> None:
        self._settings[job_id] = settings
        self._triggers[job_id] = trigger
        self._memory[job_id] = memory_bytes
        self._metrics_urls[job_id] = metrics_url

    def onQueryStarted(self, event) -> None:
        if event.name not in self._settings:
            return  # a query this process does not run as a job (e.g. a benchmark's)
        self._jobs[str(event.id)] = event.name
        write_heartbeat(self._settings[event.name], event.name, status="started", query_id=str(event.id),
                        run_id=str(event.runId), memory_bytes=self._memory.get(event.name),
                        metrics_url=self._metrics_urls.get(event.name))

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if progress.name not in self._settings:
            return
        totals = self._totals.setdefault(str(progress.runId), [0, 0])
        totals[0] += 1
        totals[1] += progress.numInputRows
        try:
            previous_start = self._batch_starts.get(str(progress.runId))
            self._batch_starts[str(progress.runId)] = progress.timestamp
            row = progress_row(progress, self._triggers.get(progress.name), previous_start)
            settings = self._settings[progress.name]
            delta_store.append_rows(settings.layout.ops_table(PROGRESS_TABLE), PROGRESS_SCHEMA, [row])
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
                memory_bytes=self._memory.get(progress.name),
                metrics_url=self._metrics_urls.get(progress.name),
            )
            log.info(
                "job=%s batch=%s input_rows=%s duration_ms=%s watermark=%s state_rows=%s",
                progress.name, progress.batchId, progress.numInputRows, progress.batchDuration,
                row["watermark"], row["state_rows_total"],
            )
        except Exception:
            log.exception("job=%s batch=%s: could not record progress", progress.name, progress.batchId)
        batch_hooks.fire(progress.name, "between_batches", progress.batchId)

    def onQueryIdle(self, event) -> None:
        """A live query with no new data: the job is healthy, so its heartbeat stays fresh (status idle)."""
        job_id = self._jobs.get(str(event.id))
        if job_id is None:
            return
        try:
            settings = self._settings[job_id]
            beat = {k: v for k, v in (read_heartbeat(settings, job_id) or {}).items()
                    if k not in ("pid", "updated_at", "job")}
            beat.update(status="idle", query_id=str(event.id), run_id=str(event.runId))
            write_heartbeat(settings, job_id, **beat)
        except Exception:
            log.exception("job=%s: could not record that the query is idle", job_id)

    def onQueryTerminated(self, event) -> None:
        log.info("query %s terminated%s", event.id, f" with {event.exception}" if event.exception else "")
        with self._lock:
            self._terminated.add(str(event.runId))
            self._lock.notify_all()

    def totals(self, run_id: str) -> tuple[int, int]:
        """(batches, input rows) of one run of a query (its run id), as recorded so far."""
        batches, rows = self._totals.get(run_id, (0, 0))
        return batches, rows

    def wait_terminated(self, run_id: str, timeout: float = 60.0) -> bool:
        """Block until the listener has handled the termination of the query's run `run_id`.

        Listener events arrive asynchronously but in order, so every batch of the query has been
        recorded by then; waiting keeps them from racing the process exit.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while run_id not in self._terminated:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True
