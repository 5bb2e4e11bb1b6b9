"""A batch recomputation of the pipeline with Structured Streaming's watermark semantics.

Micro-batch boundaries are known: per available-now run, bronze admits landing files by the source's
backfill admission (files, or bytes by Spark's rule) and each downstream stage admits `max_files` upstream
commits per batch (one data file per commit; only non-empty batches commit).
Per stage, batch k evicts with the watermark W_k = max(event time before k) - delay and drops late
rows with the previous batch's eviction watermark (Spark 3.5+ keeps two watermarks per batch).
An available-now run ends with a no-data batch when the watermark advanced, which emits the
windows that it closes. Deduplication drops rows with event_time <= the late watermark and repeated
keys; window aggregation drops (row, window) pairs whose window_end <= the late watermark; append
mode emits the windows whose window_end <= the last eviction watermark. Session aggregation drops
rows whose own session [t, t + gap) ends at or before the late watermark, merges the rest with the
open sessions of their key (an event at or before a session's end joins it) and emits the sessions
whose end <= the eviction watermark.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from include.registry import Admission, Registry


def parse_line(line: str) -> dict | None:
    """The bronze row of a landing line, or None when the line belongs in quarantine."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    value = obj.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        return None
    if obj.get("event_id") is None or obj.get("event_time") is None:
        return None
    try:
        event_time = datetime.fromisoformat(obj["event_time"]).astimezone(UTC)
    except (TypeError, ValueError):
        return None
    return {
        "event_id": str(obj["event_id"]),
        "user_id": obj.get("user_id"),
        "event_type": obj.get("event_type"),
        "value": None if value is None else float(value),
        "t": int(event_time.timestamp()),
    }


def parse_login(line: str) -> dict | None:
    """The bronze row of a `logins` landing line, or None when the line belongs in quarantine."""
    try:
        obj = json.loads(line)
        event_time = datetime.fromisoformat(obj["event_time"]).astimezone(UTC)
    except (ValueError, KeyError, TypeError):
        return None
    if obj.get("user_id") is None or obj.get("outcome") is None:
        return None
    return {"user_id": str(obj["user_id"]), "outcome": str(obj["outcome"]), "t": int(event_time.timestamp())}


def bronze_batches(files: list[Path], admission: Admission, parse=parse_line) -> list[list[dict]]:
    """Valid rows per bronze micro-batch of one run over `files` (in arrival order)."""
    return [
        [r for f in group for r in (parse(line) for line in f.read_text().splitlines()) if r]
        for group in admitted_files(files, admission)
    ]


def admitted_files(files: list[Path], admission: Admission) -> list[list[Path]]:
    """Spark's file source: a batch takes `max_files`, or files while their total size stays within
    `max_bytes` (always at least one)."""
    if admission.max_bytes:
        groups: list[list[Path]] = []
        size = 0
        for f in files:
            if groups and size + f.stat().st_size <= admission.max_bytes:
                groups[-1].append(f)
                size += f.stat().st_size
            else:
                groups.append([f])
                size = f.stat().st_size
        return groups
    step = admission.max_files or len(files) or 1
    return [files[i : i + step] for i in range(0, len(files), step)]


def admitted_commits(commits: list[list[dict]], admission: Admission) -> list[list[dict]]:
    """Delta's streaming source over upstream commits of one data file each: `max_files` commits per
    batch (Delta's default 1000). A byte limit is modeled only where every run fits far within it."""
    if admission.max_bytes:
        rows = sum(len(c) for c in commits)
        if rows * 1024 + len(commits) * 65536 > admission.max_bytes:
            raise AssertionError("the oracle models Delta's byte admission only for inputs far below the limit")
    step = admission.max_files or 1000
    return [[r for c in commits[i : i + step] for r in c] for i in range(0, len(commits), step)]


class Stage:
    """Watermark bookkeeping shared by the stateful stages."""

    def __init__(self, delay: int):
        self.delay = delay
        self.max_seen: int | None = None
        self.watermark = 0  # eviction watermark of the next batch
        self.previous_eviction = 0  # late-row watermark of the next batch

    def run(self, batches: list[list[dict]]) -> list[list[dict]]:
        """One available-now run: the data batches, then a no-data batch if the watermark moved."""
        outputs = []
        for rows in batches:
            outputs.append(self.batch(rows, late=self.previous_eviction, evict=self.watermark))
            self.previous_eviction = self.watermark
            if rows:
                self.max_seen = max([r["t"] for r in rows] + ([self.max_seen] if self.max_seen is not None else []))
                self.watermark = max(self.watermark, self.max_seen - self.delay)
        if self.watermark > self.previous_eviction:
            outputs.append(self.batch([], late=self.previous_eviction, evict=self.watermark))
            self.previous_eviction = self.watermark
        return [o for o in outputs if o]

    def batch(self, rows: list[dict], late: int, evict: int) -> list[dict]:
        raise NotImplementedError


class Deduplicate(Stage):
    def __init__(self, delay: int, keys: tuple[str, ...] = ("event_id",)):
        super().__init__(delay)
        self.keys = tuple("t" if k == "event_time" else k for k in keys)
        self.seen: set[tuple] = set()

    def batch(self, rows, late, evict):
        kept = []
        for r in rows:
            key = tuple(r[k] for k in self.keys)
            if r["t"] <= late or key in self.seen:
                continue
            self.seen.add(key)
            kept.append(r)
        return kept


class FraudAlerts(Stage):
    """`fraud_alerts` (spark_jobs/processors): an event at or before its batch's eviction watermark is late;
    the others are taken per user in (time, outcome) order once the watermark reaches them. A success clears
    the failures; `failures` failures within `within` seconds (inclusive) raise an alert and clear them."""

    def __init__(self, delay: int, failures: int, within: int):
        super().__init__(delay)
        self.failures_needed, self.within = failures, within
        self.pending: list[tuple] = []
        self.failures: dict[str, list[int]] = {}
        self.alerts: list[tuple] = []  # (entity, alert_time, window_start, event_count)

    def batch(self, rows, late, evict):
        self.pending += [(r["user_id"], r["t"], r["outcome"]) for r in rows if r["t"] > evict]
        due = sorted(p for p in self.pending if p[1] <= evict)
        self.pending = [p for p in self.pending if p[1] > evict]
        for user, t, outcome in due:
            if outcome != "failure":
                self.failures.pop(user, None)
                continue
            recent = [f for f in self.failures.get(user, []) if t - f <= self.within] + [t]
            if len(recent) >= self.failures_needed:
                self.alerts.append((user, t, recent[0], len(recent)))
                recent = []
            self.failures[user] = recent
        return []


class Sessionizer(Stage):
    """`sessionizer`: events accepted and ordered as for FraudAlerts; per user, an event at most `gap` after the
    session's last event extends it, a later one closes it; a session also closes once the eviction watermark
    reaches its last event + gap. A seeded (initial) session also takes events up to `gap` before its start;
    earlier ones are dropped. Summaries: (user, start, end, count, total, closed_at)."""

    def __init__(self, delay: int, gap: int, initial: dict[str, list] | None = None):
        super().__init__(delay)
        self.gap = gap
        self.pending: list[tuple] = []
        self.open: dict[str, list] = {user: list(s) for user, s in (initial or {}).items()}  # [start, end, n, total]
        self.summaries: list[tuple] = []

    def _close(self, user: str) -> None:
        start, end, count, total = self.open.pop(user)
        self.summaries.append((user, start, end, count, total, end + self.gap))

    def batch(self, rows, late, evict):
        self.pending += [(r["user_id"], r["t"], r["value"] or 0.0) for r in rows if r["t"] > evict]
        due = sorted(p for p in self.pending if p[1] <= evict)
        self.pending = [p for p in self.pending if p[1] > evict]
        for user, t, value in due:
            session = self.open.get(user)
            if session and session[0] - self.gap <= t <= session[1] + self.gap:
                self.open[user] = [min(session[0], t), max(session[1], t), session[2] + 1, session[3] + value]
                continue
            if session and t < session[0]:  # before a seeded session, beyond its gap: dropped
                continue
            if session:
                self._close(user)
            self.open[user] = [t, t, 1, value]
        for user in [u for u, s in self.open.items() if s[1] + self.gap <= evict]:
            self._close(user)
        return []


class StaleServices:
    """`stale_services` on processing time: batches in order, each with its processing timestamp (Spark's
    batchTimestampMs, what the timers see) and the (service, event ms) logs it read. A service read in a
    batch recovers (if stale) or has its timer moved to the batch time + `silent_ms`; then every timer that
    expired before the batch time makes its service stale. Alerts: (type, service, alert ms, window ms, count)."""

    def __init__(self, silent_ms: int):
        self.silent_ms = silent_ms
        self.status: dict[str, list] = {}  # service -> [last event ms, logs, timer ms, stale]
        self.alerts: list[tuple] = []

    def batch(self, timestamp_ms: int, logs: list[tuple[str, int]]) -> None:
        read: dict[str, list[int]] = {}
        for service, event_ms in logs:
            read.setdefault(service, []).append(event_ms)
        for service, times in read.items():
            status = self.status.get(service)
            if status and status[3]:
                self.alerts.append(("recovered", service, min(times), status[0], len(times)))
                count = len(times)
            else:
                count = len(times) + (status[1] if status else 0)
            last = max([*times, *([status[0]] if status else [])])
            self.status[service] = [last, count, timestamp_ms + self.silent_ms, False]
        for service, status in self.status.items():
            if not status[3] and status[2] < timestamp_ms:
                self.alerts.append(("stale", service, status[2], status[0], status[1]))
                status[3] = True


def expected_session_summaries(registry: Registry, drops: list[list[Path]], job_id: str = "gold_user_session_summaries",
                               initial: dict[str, list] | None = None) -> list[tuple]:
    """The sorted summaries of a sessionizer job reading silver/clickstream, over `drops` of clickstream files."""
    job = registry.job(job_id)
    silver_job, bronze_job = registry.job("silver_clickstream"), registry.job("bronze_clickstream")
    silver = Deduplicate(silver_job.source.watermark_seconds)
    sessions = Sessionizer(job.source.watermark_seconds, job.transform.params["gap"], initial)
    for files in drops:
        bronze = [b for b in bronze_batches(files, bronze_job.source.admission(True)) if b]
        deduplicated = silver.run(admitted_commits(bronze, silver_job.source.admission(True)))
        sessions.run(admitted_commits(deduplicated, job.source.admission(True)))
    return sorted(sessions.summaries)


def expected_alerts(registry: Registry, drops: list[list[Path]], job_id: str = "gold_fraud_alerts") -> list[tuple]:
    """The sorted alert rows (entity, alert_time, window_start, event_count) of a fraud_alerts job over
    `drops` (landing files of logins per run of the whole lineage, in arrival order)."""
    job = registry.job(job_id)
    silver_job = registry.writer_of(job.source.name)
    bronze_job = registry.writer_of(silver_job.source.name)
    silver = Deduplicate(silver_job.source.watermark_seconds, silver_job.transform.keys)
    alerts = FraudAlerts(job.source.watermark_seconds, job.transform.params["failures"], job.transform.params["within"])
    for files in drops:
        bronze = [b for b in bronze_batches(files, bronze_job.source.admission(True), parse_login) if b]
        deduplicated = silver.run(admitted_commits(bronze, silver_job.source.admission(True)))
        alerts.run(admitted_commits(deduplicated, job.source.admission(True)))
    return sorted(alerts.alerts)


class WindowAggregate(Stage):
    """Counts and sums per (window_start, window_end, key); `table` holds the sink's rows."""

    def __init__(self, delay: int, window: int, slide: int, append: bool, key: str, offset: int = 0):
        super().__init__(delay)
        self.window, self.slide, self.append, self.key, self.offset = window, slide, append, key, offset
        self.state: dict[tuple, list] = {}
        self.table: dict[tuple, tuple] = {}

    def batch(self, rows, late, evict):
        for r in rows:
            last_start = r["t"] - (r["t"] - self.offset) % self.slide
            for start in range(last_start, r["t"] - self.window, -self.slide):
                end = start + self.window
                if end <= late:
                    continue
                cell = self.state.setdefault((start, end, r[self.key]), [0, 0.0])
                cell[0] += 1
                cell[1] += r["value"] or 0.0
                if not self.append:
                    self.table[(start, end, r[self.key])] = tuple(cell)
        if self.append:
            for key in [k for k in self.state if k[1] <= evict]:
                self.table[key] = tuple(self.state.pop(key))
        return []


class SessionAggregate(Stage):
    """Counts and sums per (session_start, session_end, key) in append mode; `table` holds the sink's rows."""

    def __init__(self, delay: int, gap: int, key: str):
        super().__init__(delay)
        self.gap, self.key = gap, key
        self.open: dict[str, list[list]] = {}  # key -> open sessions [start, end, count, sum]
        self.table: dict[tuple, tuple] = {}

    def batch(self, rows, late, evict):
        for r in rows:
            if r["t"] + self.gap > late:
                self.open.setdefault(r[self.key], []).append([r["t"], r["t"] + self.gap, 1, r["value"] or 0.0])
        for key, sessions in self.open.items():
            merged: list[list] = []
            for session in sorted(sessions):
                if merged and session[0] <= merged[-1][1]:
                    last = merged[-1]
                    last[1], last[2], last[3] = max(last[1], session[1]), last[2] + session[2], last[3] + session[3]
                else:
                    merged.append(list(session))
            for start, end, count, total in [m for m in merged if m[1] <= evict]:
                self.table[(start, end, key)] = (count, total)
            self.open[key] = [m for m in merged if m[1] > evict]
        return []


AGGREGATES = (WindowAggregate, SessionAggregate)


def expected_gold(registry: Registry, drops: list[list[Path]]) -> dict[str, dict]:
    """Expected rows {(start, end, key): (event_count, total_value)} per windowed or session gold table.

    `drops` are the landing files of successive runs of the whole pipeline, in arrival order.
    """
    stages: dict[str, Stage] = {}
    for job_id in registry.order:
        job = registry.jobs[job_id]
        spec = job.transform
        if job.transform_kind == "deduplicate":
            stages[job_id] = Deduplicate(job.source.watermark_seconds)
        elif job.transform_kind == "window_aggregate":
            stages[job_id] = WindowAggregate(
                job.source.watermark_seconds, spec.window_seconds, spec.slide_seconds, job.sink.mode == "append",
                spec.keys[0], spec.offset_seconds,
            )
        elif job.transform_kind == "session_aggregate":
            stages[job_id] = SessionAggregate(job.source.watermark_seconds, spec.gap_seconds, spec.keys[0])
    for files in drops:
        commits: dict[str, list[list[dict]]] = {}
        for job_id in registry.order:
            job = registry.jobs[job_id]
            if job.transform_kind == "parse_json" and job.source.name == "clickstream":
                batches = bronze_batches(files, job.source.admission(available_now=True))
                commits[job.sink.table] = [b for b in batches if b]
            elif job_id in stages and job.source.name in commits:
                admitted = admitted_commits(commits[job.source.name], job.source.admission(available_now=True))
                commits[job.sink.table] = stages[job_id].run(admitted)
    return {
        registry.jobs[job_id].sink.table: stage.table
        for job_id, stage in stages.items()
        if isinstance(stage, AGGREGATES)
    }


def expected_silver_count(registry: Registry, drops: list[list[Path]]) -> int:
    job = next(j for j in registry.jobs.values() if j.transform_kind == "deduplicate" and j.sink.table == "silver/clickstream")
    bronze = registry.job("bronze_clickstream")
    stage = Deduplicate(job.source.watermark_seconds)
    total = 0
    for files in drops:
        commits = [b for b in bronze_batches(files, bronze.source.admission(available_now=True)) if b]
        total += sum(len(b) for b in stage.run(admitted_commits(commits, job.source.admission(available_now=True))))
    return total
