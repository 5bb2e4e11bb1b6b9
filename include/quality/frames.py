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
from functools import reduce
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from include.quality.suites import TableSpec
from include.quality.timestamps import MICROS, epoch_micros
from include.spark_session import get_spark
from include.storage import delta as delta_store
from include.storage import reader
from include.storage.paths import StoragePath

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowSelection:
    """The rows of one validation: versions `version_from..version_to` of the table."""

    version_from: int
    version_to: int
    files: tuple[tuple[int, str], ...] | None  # (version, data file) of the files added in the range; None: whole snapshot
    num_rows: int

    @property
    def incremental(self) -> bool:
        return self.files is not None


def select_rows(path: StoragePath, spec: TableSpec, latest: int, last_validated: int | None,
                full: bool) -> RowSelection | None:
    """The rows of versions up to `latest` to validate, or None when none is newer than `last_validated`."""
    whole = RowSelection(0, latest, None, delta_store.open_table(path, version=latest).count())
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
    if delta_store.open_table(path).metadata().partition_columns:  # their values are not in the files
        return whole
    try:
        adds = [(v, a) for v in range(last_validated + 1, latest + 1) for a in delta_store.commit_files(path, v)]
    except (ValueError, FileNotFoundError) as exc:  # a commit removed data, or the log was cleaned up
        log.warning("%s: cannot read the added files only (%s); validating every row", spec.table, exc)
        return whole
    added = tuple((v, unquote(a["path"])) for v, a in adds)
    counted = [json.loads(a.get("stats") or "{}").get("numRecords") for _, a in adds]
    rows = sum(counted) if None not in counted else read_added(path, added, None).num_rows
    return RowSelection(last_validated + 1, latest, added, rows)


def _by_version(added: tuple[tuple[int, str], ...]) -> dict[int, list[str]]:
    by_version: dict[int, list[str]] = {}
    for version, file in added:
        by_version.setdefault(version, []).append(file)
    return by_version


def read_added(path: StoragePath, added: tuple[tuple[int, str], ...], columns: list[str] | None) -> pa.Table:
    """The rows of the data files added by some commits, under the table's latest schema."""
    return delta_store.read_files(path, _by_version(added), columns)


class ArrowOps:
    """:class:`include.quality.suites.base.RowOps` on an Arrow table: numpy arrays (null: NaN)."""

    def __init__(self, rows: pa.Table):
        self.rows = rows

    def seconds(self, column: str) -> np.ndarray:
        return epoch_micros(self.rows[column]) // MICROS

    def exact_seconds(self, column: str) -> np.ndarray:
        return epoch_micros(self.rows[column]) / MICROS

    def mod(self, value: np.ndarray, divisor: int) -> np.ndarray:
        return value % divisor

    def is_value(self, column: str, value: bool) -> np.ndarray:
        return pc.fill_null(pc.equal(self.rows[column], value), False).to_numpy(zero_copy_only=False)

    def where(self, condition: np.ndarray, value, otherwise) -> np.ndarray:
        return np.where(condition, value, np.nan if otherwise is None else otherwise)

    def fill_null(self, value: np.ndarray, fill) -> np.ndarray:
        return np.where(np.isnan(value), fill, value)

    def non_null_count(self, columns: tuple[str, ...]) -> np.ndarray:
        return sum((self.rows[c].is_valid().to_numpy(zero_copy_only=False).astype(np.int64) for c in columns),
                   np.zeros(self.rows.num_rows, np.int64))

    def field_names(self, column: str, separator: str) -> np.ndarray:
        return np.array([None if text is None else separator.join(sorted(json.loads(text)))
                         for text in self.rows[column].to_pylist()], dtype=object)


class SparkOps:
    """:class:`include.quality.suites.base.RowOps` on Spark columns."""

    def __init__(self):
        from pyspark.sql import functions as F

        self.F = F

    def seconds(self, column: str):
        return self.F.unix_timestamp(column)

    def exact_seconds(self, column: str):
        return self.F.col(column).cast("double")

    def mod(self, value, divisor: int):
        return self.F.pmod(value, self.F.lit(divisor))

    def is_value(self, column: str, value: bool):
        return self.F.coalesce(self.F.col(column) == self.F.lit(value), self.F.lit(False))

    def where(self, condition, value, otherwise):
        return self.F.when(condition, value).otherwise(self.F.lit(otherwise))

    def fill_null(self, value, fill):
        return self.F.coalesce(value, self.F.lit(fill))

    def non_null_count(self, columns: tuple[str, ...]):
        return sum((self.F.col(c).isNotNull().cast("long") for c in columns), self.F.lit(0).cast("long"))

    def field_names(self, column: str, separator: str):
        return self.F.array_join(self.F.array_sort(self.F.json_object_keys(column)), separator)


def pandas_rows(path: StoragePath, spec: TableSpec, selection: RowSelection, now_epoch: int) -> pd.DataFrame:
    """The selected rows (only the columns the row checks need) plus the derived columns."""
    columns = list(spec.row_columns)
    if selection.files is None:
        rows = delta_store.read_table(path, version=selection.version_to, columns=columns)
    else:
        rows = read_added(path, selection.files, columns)
    derived = spec.derived(ArrowOps(rows), now_epoch)
    frame = rows.select([c for c in spec.check_columns if c not in derived]).to_pandas()
    for name, values in derived.items():
        frame[name] = values
    return frame[list(spec.check_columns)]


def value_counts(frame, column: str, spark: bool) -> dict:
    """The rows per non-null value of `column` in a row frame (pandas, or Spark when `spark`)."""
    if spark:
        return {r[column]: r["count"] for r in frame.where(frame[column].isNotNull()).groupBy(column).count().collect()}
    return {k: int(v) for k, v in frame[column].dropna().value_counts().items()}


def spark_rows(settings, path: StoragePath, spec: TableSpec, selection: RowSelection, now_epoch: int):
    """The selected rows as a Spark DataFrame with the derived columns (for tables above the threshold)."""
    from pyspark.sql import functions as F


    spark = get_spark(settings, app_name="lakehouse-quality")

    def at(version: int):
        return spark.read.format("delta").option("versionAsOf", version).load(str(path))

    if selection.files is None:
        frame = at(selection.version_to).select(*spec.row_columns)
    else:  # each commit's files at its version (a compaction may have replaced them since)
        parts = []
        for version, files in _by_version(selection.files).items():  # under the latest names (renamed since)
            now = reader.names_now(path, version)
            rows = at(version).where(F.col("_metadata.file_name").isin([f.rsplit("/", 1)[-1] for f in files]))
            parts.append(rows.select(*[F.col(then).alias(name) for then, name in now.items()
                                       if name in spec.row_columns]).select(*spec.row_columns))
        frame = reduce(lambda a, b: a.unionByName(b), parts) if parts else \
            at(selection.version_to).select(*spec.row_columns).limit(0)
    derived = spec.derived(SparkOps(), now_epoch)
    return frame.select(*[derived[c].alias(c) if c in derived else c for c in spec.check_columns])
