"""The foreachBatch sink: one exactly-once Delta commit per table per micro-batch."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from include import checkpoints
from include.registry import JobSpec
from include.settings import Settings
from include.storage import delta as delta_store
from spark_jobs import hooks
from spark_jobs.transforms import QUARANTINE_REASON, RAW_LINE


def make_batch_writer(settings: Settings, job: JobSpec) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function: one exactly-once Delta commit per table per batch."""
    checkpoint = settings.layout.checkpoint(job.id)
    sink = job.sink

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        query_id = checkpoints.query_id(checkpoint)
        if query_id is None:
            raise RuntimeError(f"job {job.id!r}: no query id in checkpoint {checkpoint}")
        app_id = f"{job.id}:{query_id}"
        data = batch.toArrow()
        hooks.fire(job.id, "before_commit", batch_id)
        for table, rows, mode in _routes(job, data):
            if rows.num_rows:
                delta_store.commit_batch(
                    settings.layout.table(table),
                    rows,
                    app_id=app_id,
                    batch_id=batch_id,
                    mode=mode,
                    merge_keys=sink.merge_keys if table == sink.table else (),
                    partition_by=sink.partition_by if table == sink.table else (),
                )
        hooks.fire(job.id, "after_commit", batch_id)

    return write_batch


def _routes(job: JobSpec, data: pa.Table) -> list[tuple[str, pa.Table, str]]:
    """Split a batch between the sink table and the quarantine table."""
    if not job.sink.quarantine_table:
        return [(job.sink.table, data, job.sink.mode)]
    bad = pc.is_valid(data[QUARANTINE_REASON])
    good_rows = data.filter(pc.invert(bad)).select(list(job.output_schema))
    bad_rows = data.filter(bad)
    quarantined = pa.table(
        {
            "raw_line": bad_rows[RAW_LINE],
            "_source_file": bad_rows["_source_file"],
            "reason": bad_rows[QUARANTINE_REASON],
            "_ingested_at": bad_rows["_ingested_at"],
        }
    )
    return [(job.sink.quarantine_table, quarantined, "append"), (job.sink.table, good_rows, "append")]
