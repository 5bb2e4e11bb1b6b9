"""Landing lines too long to read, in bounded memory.

Landing files are read with "\\n" as the only line separator (a "\\r" stays in the line) and Hadoop's
`mapreduce.input.linerecordreader.line.maxlength`: a line longer than the source's `max_line_bytes`
is skipped by the reader, which never holds more than that many bytes of it. So that nothing is lost
silently, every micro-batch accounts for each of its landing files: the bytes of the lines read (plus
their separators) against the file's size. A file with bytes unaccounted for gets one quarantine row,
reason `line_too_long`, saying how many bytes were not read; the landing file keeps them.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from urllib.parse import urlparse

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from include import checkpoints
from include.registry import JobSpec, SourceSpec
from include.settings import Settings
from include.storage.files import local_path

HADOOP_MAX_LINE = "mapreduce.input.linerecordreader.line.maxlength"
LINE_BYTES = "_line_bytes"
LINE_TOO_LONG = "line_too_long"
# A file's first bytes may be a UTF-8 byte order mark (skipped by the reader) and its last line may lack
# a separator: up to this many bytes of difference mean nothing was skipped.
SLACK_BYTES = 3


def reader_options(source: SourceSpec) -> dict[str, str]:
    """Options of the text reader of a landing source."""
    # The reader skips a line when the bytes it consumed (line + "\n") reach the limit.
    return {"lineSep": "\n", HADOOP_MAX_LINE: str(source.max_line_bytes + 2)}


def tally(batch: DataFrame, good: F.Column) -> tuple[int, int, dict[str, int]]:
    """Good rows, quarantined rows and, per landing file, the bytes its lines account for: one Spark job."""
    per_file = batch.groupBy("_source_file").agg(
        F.count_if(good).alias("good"), F.count_if(~good).alias("bad"),
        F.sum(F.col(LINE_BYTES) + 1).alias("bytes_read"),
    ).collect()
    return (sum(r["good"] for r in per_file), sum(r["bad"] for r in per_file),
            {local_path(r["_source_file"]): r["bytes_read"] for r in per_file})


def unread_lines(settings: Settings, job: JobSpec, batch_id: int, bytes_read: dict[str, int]) -> list[dict]:
    """A quarantine row for each landing file of the batch whose lines do not account for its size."""
    rows = []
    now = datetime.now(UTC)
    for uri in checkpoints.landing_files_of_batch(settings.layout.checkpoint(job.id), batch_id):
        path, encoded = local_path(uri), urlparse(uri).path
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            continue  # removed after admission: Spark read none of it either
        missing = size - bytes_read.get(path, 0)
        if missing > SLACK_BYTES:
            rows.append({
                "raw_line": f"[{missing} bytes in lines longer than {job.source.max_line_bytes} bytes (the source's "
                            "max_line_bytes) were not read; they remain in the landing file]",
                "_source_file": f"file:{encoded}", "reason": LINE_TOO_LONG, "_ingested_at": now,
            })
    return rows

