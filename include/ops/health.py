"""Health of a job: is it running (its lease), how fresh is its heartbeat, and what its recent batches
in `_ops/query_progress` say (slow, falling behind, state growing, watermark stuck)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from include import checkpoints
from include.checkpoints.state_files import operator_partitions, skew
from include.records import lease
from include.records.heartbeats import read_heartbeat
from include.records.query_progress import PROGRESS_TABLE
from include.registry import JobSpec, Registry
from include.registry.operations import jvm_memory_bytes
from include.settings import Settings
from include.storage import delta as delta_store

MIN_BATCHES_FOR_MEDIAN = 3  # slow_batches needs at least this many batches (after each run's first) in the window
IDLE_REPORT_SECONDS = 10  # spark.sql.streaming.noDataProgressEventInterval (Spark's default)


@dataclass
class Health:
    """What :func:`check_job` found; `problems` uses the names documented in :func:`check_job`."""

    job: str
    running: bool
    pid: int | None = None
    heartbeat: dict | None = None
    heartbeat_age_seconds: float | None = None
    last_batch_id: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.running and not self.problems


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    moment = datetime.fromisoformat(str(text))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def recent_batches(settings: Settings, job_id: str, query_id: str | None, limit: int) -> list[dict]:
    """The last `limit` batches of the query in `_ops/query_progress`, oldest first (replays deduplicated)."""
    path = settings.layout.ops_table(PROGRESS_TABLE)
    if query_id is None or limit <= 0 or not delta_store.table_exists(path):
        return []
    # only the query's last `limit` batches: a live fleet adds rows all day, kept for days (the progress retention)
    query = f"job = {delta_store.sql_string(job_id)} AND query_id = {delta_store.sql_string(query_id)}"
    table = delta_store.read_table(path, where=f"{query} AND batch_id > (SELECT max(batch_id) FROM t WHERE {query}) "
                                               f"- {int(limit)}")
    return last_batches(table.to_pylist(), query_id, limit)


def last_batches(rows: list[dict], query_id: str | None, limit: int) -> list[dict]:
    """Of progress `rows` (a job's), the query's batches with the `limit` highest ids, oldest first, a batch replayed
    after a crash by its last record."""
    rows = [r for r in rows if r["query_id"] == query_id]
    if query_id is None or limit <= 0 or not rows:
        return []
    newest = max(r["batch_id"] for r in rows)
    latest: dict[int, dict] = {}
    for row in sorted(rows, key=lambda r: (r["batch_id"], r["progress_time"] or datetime.min.replace(tzinfo=UTC))):
        if row["batch_id"] > newest - limit:
            latest[row["batch_id"]] = row
    return [latest[b] for b in sorted(latest)]


STATE_HEALTH = ("state_growing", "watermark_stuck", "dropped_by_watermark", "state_memory_high", "partition_skew")


def diagnose(job: JobSpec, batches: list[dict], memory_bytes: int | None = None,
             partition_keys: dict[int, list[int]] | None = None, interval_seconds: int | None = None) -> list[str]:
    """Problems in a job's recent progress rows (oldest first, at most one window), its executor memory
    (`memory_bytes`) and the keys per state partition of each operator (`partition_keys`); `interval_seconds`: how
    far apart its live batches come (Registry.live_interval_seconds; default its own processing-time interval).

    slow_batches: median batch duration above that interval (at least 3 batches, each run's first
    batch in the window left out: it carries its driver's warm-up and backlog);
    falling_behind: mean input rate above mean processing rate over batches with input;
    state_growing: state rows strictly increasing with none removed (full window);
    watermark_stuck: input but no watermark advance (full window, stateful transforms with a watermark only);
    dropped_by_watermark: rows dropped by the watermark above `supervision.health.max_dropped_fraction` of the
    input rows;
    state_memory_high: the last batch's state memory above `state_memory_fraction` of the executor memory;
    partition_skew: an operator's max / median keys per partition above `max_partition_skew` (its largest
    partition holding at least `skew_min_keys` keys).
    """
    problems: list[str] = []
    thresholds = job.supervision.health
    for keys in (partition_keys or {}).values():
        if keys and max(keys) >= thresholds.skew_min_keys and skew(keys) > thresholds.max_partition_skew:
            problems.append("partition_skew")
            break
    if not batches:
        return problems
    interval_ms = (job.triggers["live"].interval_seconds if interval_seconds is None else interval_seconds) * 1000
    # A run's first batch waits for its JVM's class loading and JIT and reads its backlog: not a measure of the job's
    # pace. After restarts the window may hold little else (each a new run), so each run's first batch is left out.
    first_of_run: dict[str | None, int] = {}
    for b in batches:
        first_of_run.setdefault(b.get("run_id"), b["batch_id"])
    durations = [b["batch_duration_ms"] for b in batches
                 if b["batch_duration_ms"] is not None and first_of_run[b.get("run_id")] != b["batch_id"]]
    if interval_ms and len(durations) >= MIN_BATCHES_FOR_MEDIAN and statistics.median(durations) > interval_ms:
        problems.append("slow_batches")
    with_input = [b for b in batches if b["num_input_rows"]]
    if with_input:
        incoming = statistics.mean(b["input_rows_per_second"] or 0.0 for b in with_input)
        processed = statistics.mean(b["processed_rows_per_second"] or 0.0 for b in with_input)
        if incoming > processed:
            problems.append("falling_behind")
    fed_rows = sum(b["num_input_rows"] or 0 for b in batches)
    dropped = sum(b["state_rows_dropped_by_watermark"] or 0 for b in batches)
    if fed_rows and dropped / fed_rows > thresholds.max_dropped_fraction:
        problems.append("dropped_by_watermark")
    memory = batches[-1]["state_memory_used_bytes"]
    if memory_bytes and memory and memory > thresholds.state_memory_fraction * memory_bytes:
        problems.append("state_memory_high")
    full = len(batches) >= max(job.supervision.health_window_batches, 2)
    if full:
        totals = [b["state_rows_total"] or 0 for b in batches]
        removed = sum(b["state_rows_removed"] or 0 for b in batches)
        if removed == 0 and all(a < b for a, b in zip(totals, totals[1:], strict=False)):
            problems.append("state_growing")
    if full and job.stateful and any(s.watermark_seconds is not None for s in job.sources):
        # Input in a batch moves the watermark of a later batch, so the last batch's input does not count.
        # (A job without a watermark, e.g. running totals over all time, has none to advance.)
        fed = any(b["num_input_rows"] for b in batches[:-1])
        first, last = batches[0]["watermark"], batches[-1]["watermark"]
        if fed and (last is None or (first is not None and last <= first)):
            problems.append("watermark_stuck")
    return problems


def check_job(settings: Settings, registry: Registry, job_id: str, now: float | None = None,
              progress: list[dict] | None = None) -> Health:
    """Is the job running (its lease held by a live process), and what is wrong with it.

    Problems: "stalled" (running, heartbeat older than supervision.stall_after_seconds, 0 meaning
    6 live batch intervals (Registry.live_interval_seconds) and at least 30 s: an idle query reports itself every 10 s), and from the query's last `health_window_batches` batches:
    "slow_batches", "falling_behind", "state_growing", "watermark_stuck" (see :func:`diagnose`;
    reported even when the job is not running). `now` (epoch seconds): look as of another time. `progress`: the job's
    progress rows when the caller read them all already (a report on every job), else its last batches are read.
    """
    job = registry.job(job_id)
    now = time.time() if now is None else now
    owner = lease.holder(settings, job_id)
    running = owner is not None
    pid = owner.pid if owner else None
    beat = read_heartbeat(settings, job_id)
    updated = _epoch(beat.get("updated_at")) if beat else None
    query_id = (beat or {}).get("query_id") or checkpoints.query_id(settings.layout.checkpoint(job_id))
    window = job.supervision.health_window_batches
    batches = (recent_batches(settings, job_id, query_id, window) if progress is None else
               last_batches(progress, query_id, window))
    last_batch_id = (beat or {}).get("batch_id")
    if last_batch_id is None and batches:
        last_batch_id = batches[-1]["batch_id"]
    health = Health(
        job=job_id, running=running, pid=pid, heartbeat=beat,
        heartbeat_age_seconds=None if updated is None else now - updated, last_batch_id=last_batch_id,
    )
    if running:
        # A heartbeat left by an earlier process says nothing about this one: then count from its start.
        own_beat = beat is not None and (pid is None or beat.get("pid") == pid)
        since = updated if own_beat else _epoch(owner.acquired_at if owner else None)
        # An idle query refreshes its heartbeat only every IDLE_REPORT_SECONDS (Spark's idle event interval).
        stall_after = job.supervision.stall_after_seconds or max(6 * registry.live_interval_seconds(job_id),
                                                                 3 * IDLE_REPORT_SECONDS)
        if since is not None and now - since > stall_after:
            health.problems.append("stalled")
    partitions = {}
    committed = checkpoints.latest_committed_batch(settings.layout.checkpoint(job_id))
    if job.stateful and committed is not None:
        operators = operator_partitions(settings.layout.checkpoint(job_id), committed + 1)
        partitions = {op: [p.keys for p in files] for op, files in operators.items()}
    # the memory its state lives in, as its driver measured it (else what a driver is given by default)
    memory = (beat or {}).get("memory_bytes") or jvm_memory_bytes(settings.spark_driver_memory)
    health.problems += diagnose(job, batches, memory, partitions, registry.live_interval_seconds(job_id))
    return health
