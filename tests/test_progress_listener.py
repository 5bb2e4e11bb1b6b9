"""The progress listener gets its events decoded from Spark's JSON: the same facts as PySpark's own listener."""

from __future__ import annotations

import json
import math
from decimal import ROUND_HALF_UP, Decimal

from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

from include.records.query_progress import progress_row
from spark_jobs.progress_listener import add_listener, progress_event
from tests.support.helpers import wait_for


def as_in_json(rate: float) -> float:
    """A rate as it reads from Spark's JSON: rounded half up to one decimal (`BigDecimal(rate).setScale(1, HALF_UP)`), or
    NaN where Spark left it out (NaN or infinite). Rounded, it differs by up to 0.05, and at a tie by a float's error
    more (31.25 -> 31.3: 0.05000000000000071), which failed a test that allowed 0.05."""
    if not math.isfinite(rate):
        return math.nan
    return float(Decimal(repr(rate)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class Collected(StreamingQueryListener):
    def __init__(self):
        self.started, self.progress, self.terminated = [], [], []

    def onQueryStarted(self, event):
        self.started.append(event)

    def onQueryProgress(self, event):
        self.progress.append(event.progress)

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        self.terminated.append(event)


def first_progress(spark, tmp_path, rows: int):
    """The progress of the first batch of an available-now query reading `rows` JSON lines, as our listener gets it."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.json").write_text("".join(f'{{"n": {n}}}\n' for n in range(rows)))
    ours = Collected()
    bridge = add_listener(spark, ours)
    try:
        query = (spark.readStream.schema("n int").json(str(tmp_path / "in")).writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        wait_for(lambda: ours.terminated, 60, "the query's end")
    finally:
        spark._jsparkSession.streams().removeListener(bridge)
    return ours.progress[0]


def test_events_from_json_carry_what_pysparks_listener_sees(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for n in range(2):
        (landing / f"{n}.json").write_text("".join(
            json.dumps({"user": f"u{i % 3}", "at": f"2026-01-01T00:{n:02d}:{i:02d}Z"}) + "\n" for i in range(20)))
    ours, pysparks = Collected(), Collected()
    bridge = add_listener(spark, ours)
    spark.streams.addListener(pysparks)
    try:
        events = (spark.readStream.schema("user string, at timestamp").option("maxFilesPerTrigger", 1)
                  .json(str(landing)).withWatermark("at", "10 seconds")
                  .groupBy(F.window("at", "1 minute"), "user").count())
        query = (events.writeStream.queryName("listener_probe").format("noop").outputMode("append")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        wait_for(lambda: ours.terminated and pysparks.terminated, 60, "both listeners to see the query end")
    finally:
        spark._jsparkSession.streams().removeListener(bridge)
        spark.streams.removeListener(pysparks)

    assert [(e.id, e.runId, e.name) for e in ours.started] == [(e.id, e.runId, e.name) for e in pysparks.started]
    assert [(str(e.id), str(e.runId), e.exception) for e in ours.terminated] == [(query.id, query.runId, None)]
    assert len(ours.progress) >= 2 and [p.batchId for p in ours.progress] == [p.batchId for p in pysparks.progress]
    # the row each batch leaves in _ops/query_progress: counts, durations, watermark and state metrics alike
    rates = ("input_rows_per_second", "processed_rows_per_second")
    for decoded, walked in zip(ours.progress, pysparks.progress, strict=True):
        row, expected = progress_row(decoded), progress_row(walked)
        assert {k: v for k, v in row.items() if k not in rates} == {k: v for k, v in expected.items() if k not in rates}
        assert all(same(row[k], as_in_json(expected[k])) for k in rates), [(k, row[k], expected[k]) for k in rates]
    assert sum(p.numInputRows for p in ours.progress) == 40
    assert max(p.stateOperators[0].numRowsTotal for p in ours.progress) > 0
    # the state store's commit, per operator (what bench/state_commit_modes.py compares)
    [operator] = json.loads(progress_row(ours.progress[-1])["state_operators"])
    assert operator["commitTimeMs"] >= 0 and "rocksdbCommitCheckpointLatency" in operator["rocksdb"], operator


def test_a_rate_spark_leaves_out_of_the_json_decodes_as_nan(spark, tmp_path):
    """Spark writes no key for a NaN or infinite rate; PySpark's decoder would fail on the missing key."""
    spark_json = json.loads(first_progress(spark, tmp_path, 1).json)
    for source in spark_json["sources"]:
        del source["inputRowsPerSecond"], source["processedRowsPerSecond"]
    decoded = progress_event(json.dumps({"progress": spark_json})).progress
    assert decoded.numInputRows == 1 and math.isnan(decoded.sources[0].inputRowsPerSecond)
    assert progress_row(decoded)["num_input_rows"] == 1


def test_the_input_rate_of_a_run_on_its_upstreams_commits_counts_from_its_previous_batch(spark, tmp_path):
    """Spark divides a batch's rows by the time since its last trigger: for a run on its upstream's commits, the
    second-long poll before the batch. The row divides them by the time since the run's previous batch started."""
    spark_json = {**json.loads(first_progress(spark, tmp_path, 30).json), "timestamp": "2026-01-01T00:00:10.000Z"}
    progress = progress_event(json.dumps({"progress": spark_json})).progress
    assert progress.numInputRows == 30
    following = progress_row(progress, "on-upstream-commit", "2026-01-01T00:00:04.000Z")
    assert following["input_rows_per_second"] == 5.0  # 30 rows since the batch 6 s before
    assert progress_row(progress, "on-upstream-commit")["input_rows_per_second"] == 0.0  # the run's first batch
    clocked = progress_row(progress, "processing-time=5 seconds", "2026-01-01T00:00:04.000Z")
    assert clocked["input_rows_per_second"] == float(progress.inputRowsPerSecond or 0.0)  # Spark's own
