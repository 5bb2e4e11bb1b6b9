"""Landing lines too long to read, in bounded memory.

Landing files are read with "\\n" as the only line separator (a "\\r" stays in the line) and Hadoop's
`mapreduce.input.linerecordreader.line.maxlength`: a line longer than the source's `max_line_bytes`
is skipped by the reader, which never holds more than that many bytes of it. So that nothing is lost
silently, every micro-batch accounts for each of its landing files: the bytes of the lines read (plus
their separators) against the file's size. A file with bytes unaccounted for gets one quarantine row,
reason `line_too_long`, saying how many bytes were not read; the landing file keeps them. Such a file is read
again without its long lines (:func:`reread`), so a long line that Spark's splits cut is one row, never pieces.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from include import checkpoints
from include.registry import JobSpec, SourceSpec
from include.settings import Settings
from include.storage.paths import StoragePath, storage_path

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
            {file_key(r["_source_file"]): r["bytes_read"] for r in per_file})


def short_read_files(settings: Settings, job: JobSpec, batch_id: int, bytes_read: dict[str, int]) -> dict[str, int]:
    """{file URI: bytes its lines do not account for} of the batch's landing files with lines too long to read."""
    short = {}
    for uri in checkpoints.landing_files_of_batch(settings.layout.checkpoint(job.id), batch_id):
        try:
            size = storage_path(uri, settings.s3).stat().st_size
        except FileNotFoundError:
            continue  # removed after admission: Spark read none of it either
        missing = size - bytes_read.get(file_key(uri), 0)
        if missing > SLACK_BYTES:
            short[uri] = missing
    return short


def unread_lines(job: JobSpec, short: dict[str, int]) -> list[dict]:
    """A quarantine row for each landing file whose lines do not account for its size."""
    now = datetime.now(UTC)
    return [{"raw_line": f"[{missing} bytes in lines longer than {job.source.max_line_bytes} bytes (the source's "
                         "max_line_bytes) were not read; they remain in the landing file]",
             "_source_file": source_file_value(uri), "reason": LINE_TOO_LONG, "_ingested_at": now}
            for uri, missing in short.items()]


def reread(settings: Settings, job: JobSpec, batch_id: int, batch: DataFrame, files: list[str],
           parse: Callable[[DataFrame], DataFrame]) -> DataFrame:
    """The batch with the rows of `files` read again without their long lines.

    Where Spark splits a file inside a line too long to read, the reader of the next split starts in the middle of
    that line and returns its last piece as a line of its own. So a file with lines too long to read (rare) is read
    again here: its short lines copied, in bounded memory, to a file of their own (under :func:`reread_dir`, removed
    after the batch), which Spark reads and `parse` parses as the job does; its rows replace the file's."""
    directory = reread_dir(settings, job.id, batch_id)
    directory.mkdir(parents=True, exist_ok=True)
    frames = [batch.where(~F.col("_source_file").isin([source_file_value(uri) for uri in files]))]
    for number, uri in enumerate(files):
        copy = directory / f"{number}.lines"
        _copy_short_lines(storage_path(uri, settings.s3), copy, job.source.max_line_bytes)
        lines = batch.sparkSession.read.format("text").options(**reader_options(job.source)).load(str(copy))
        frames.append(parse(lines).withColumn("_source_file", F.lit(source_file_value(uri))))
    return reduce(DataFrame.unionByName, frames)


def source_file_value(uri: str) -> str:
    """The `_source_file` value of the rows of a landing file (as Spark's `_metadata.file_path` writes it)."""
    parsed = urlparse(uri)
    return uri if parsed.scheme in ("s3", "s3a") else f"file:{parsed.path}"


def file_key(uri: str) -> str:
    """One name per landing file, whichever way Spark wrote its URI (`file:/a`, `file:///a`, percent-encoded)."""
    parsed = urlparse(uri)
    path = unquote(parsed.path)
    return path if parsed.scheme in ("file", "") else f"{parsed.scheme}://{parsed.netloc}{path}"


def reread_dir(settings: Settings, job_id: str, batch_id: int) -> StoragePath:
    return settings.layout.checkpoints / f"{job_id}.reread" / str(batch_id)


def _copy_short_lines(source: StoragePath, target: StoragePath, limit: int, chunk: int = 1 << 20) -> None:
    """Copy the lines of `source` of at most `limit` bytes to `target`, holding at most `limit` bytes of a line (on
    S3 through a local file, put whole)."""
    with tempfile.TemporaryDirectory(prefix="lakehouse-reread-") as scratch:
        local = Path(str(target)) if target.is_local else Path(scratch) / target.name
        _write_short_lines(source, local, limit, chunk)
        if not target.is_local:
            target.upload_from(local)


def _write_short_lines(source: StoragePath, target: Path, limit: int, chunk: int) -> None:
    with target.open("wb") as writer:
        line, too_long = bytearray(), False
        for block in source.read_chunks(chunk):
            for piece, ends in _split(block):
                if not too_long:
                    line += piece
                    too_long = len(line) > limit
                    if too_long:
                        line.clear()
                if ends:
                    if not too_long:
                        writer.write(bytes(line) + b"\n")
                    line, too_long = bytearray(), False
        if line and not too_long:
            writer.write(bytes(line) + b"\n")


def _split(block: bytes) -> list[tuple[bytes, bool]]:
    """A block's pieces between line ends, each with whether a line end follows it."""
    parts = block.split(b"\n")
    return [(part, True) for part in parts[:-1]] + [(parts[-1], False)]
