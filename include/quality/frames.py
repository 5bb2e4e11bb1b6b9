"""Which gold rows a run validates, and the frames (pandas or Spark) the row expectations run on.

Incremental runs of an append-mode table validate the rows of the files added by the Delta commits
after the last validated version. Update-mode (MERGE) tables rewrite files, so their row checks
read the latest snapshot whenever it changed; so do ``--full`` runs, first runs, partitioned tables
and tables whose version went backwards (recreated).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from include import delta_store
from include.quality.suites import WindowedTable

log = logging.getLogger(__name__)

DERIVED = ("_window_seconds", "_start_offset_seconds", "_seconds_in_future")


@dataclass(frozen=True)
class RowSelection:
    """The rows of one validation: versions `version_from..version_to` of the table."""

    version_from: int
    version_to: int
    files: tuple[str, ...] | None  # parquet files (relative to the table) added in the range; None: whole snapshot
    num_rows: int

    @property
    def incremental(self) -> bool:
        return self.files is not None


def select_rows(path: Path, spec: WindowedTable, latest: int, last_validated: int | None,
                full: bool) -> RowSelection | None:
    """The rows of versions up to `latest` to validate, or None when none is newer than `last_validated`."""
    whole = RowSelection(0, latest, None, DeltaTable(str(path), version=latest).count())
    if full or last_validated is None:
        return whole
    if last_validated > latest:
        log.warning("%s: version %d is older than the last validated version %d (table recreated?); "
                    "validating every row", spec.table, latest, last_validated)
        return whole
    if last_validated == latest:
        return None
    if spec.mode != "append":  # MERGE rewrites files: validate the snapshot
        return whole
    if DeltaTable(str(path)).metadata().partition_columns:  # their values are not in the files
        return whole
    try:
        adds = [a for v in range(last_validated + 1, latest + 1) for a in delta_store.commit_files(path, v)]
    except (ValueError, FileNotFoundError) as exc:  # a commit removed data, or the log was cleaned up
        log.warning("%s: cannot read the added files only (%s); validating every row", spec.table, exc)
        return whole
    rows = sum(_num_records(path, a) for a in adds)
    return RowSelection(last_validated + 1, latest, tuple(unquote(a["path"]) for a in adds), rows)


def _num_records(path: Path, add: dict) -> int:
    stats = json.loads(add.get("stats") or "{}")
    if "numRecords" in stats:
        return int(stats["numRecords"])
    import pyarrow.parquet as pq

    return pq.ParquetFile(path / unquote(add["path"])).metadata.num_rows


def epoch_seconds(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamps as whole epoch seconds (floored); nulls are not expected in window bounds."""
    micros = pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())
    return micros.to_numpy(zero_copy_only=False) // 1_000_000


def pandas_rows(path: Path, spec: WindowedTable, selection: RowSelection, now_epoch: int) -> pd.DataFrame:
    """The selected rows (only the columns the row checks need) plus the derived columns."""
    columns = ["window_start", "window_end", *spec.keys, *spec.counts, *spec.sums]
    if selection.files is None:
        rows = delta_store.read_table(path, version=selection.version_to, columns=columns)
    else:
        import pyarrow.parquet as pq

        schema = pa.schema(DeltaTable(str(path)).schema().to_arrow())
        parts = [pq.read_table(path / f).select(schema.names).cast(schema).select(columns) for f in selection.files]
        rows = pa.concat_tables(parts) if parts else schema.empty_table().select(columns)
    starts, ends = epoch_seconds(rows["window_start"]), epoch_seconds(rows["window_end"])
    frame = rows.drop_columns(["window_start", "window_end"]).to_pandas()
    frame["_window_seconds"] = ends - starts
    frame["_start_offset_seconds"] = starts % spec.slide_seconds
    frame["_seconds_in_future"] = starts - now_epoch
    return frame


def spark_rows(settings, path: Path, spec: WindowedTable, selection: RowSelection, now_epoch: int):
    """The selected rows as a Spark DataFrame with the derived columns (for tables above the threshold)."""
    from pyspark.sql import functions as F

    from include.spark_session import get_spark

    files = DeltaTable(str(path), version=selection.version_to).file_uris() if selection.files is None else [str(path / f) for f in selection.files]
    spark = get_spark(settings, app_name="lakehouse-quality")
    frame = spark.read.option("basePath", str(path)).parquet(*files).select("window_start", "window_end", *spec.keys, *spec.counts, *spec.sums)
    start, end = F.unix_timestamp("window_start"), F.unix_timestamp("window_end")
    return (frame.withColumn("_window_seconds", end - start)
            .withColumn("_start_offset_seconds", F.pmod(start, F.lit(spec.slide_seconds)))
            .withColumn("_seconds_in_future", start - F.lit(now_epoch))
            .drop("window_start", "window_end"))
