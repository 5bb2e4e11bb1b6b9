"""A streaming Spark data source over an append-only Delta table, read through delta-rs.

Offsets are Delta versions: ``{"version": v}`` means every commit up to ``v`` is consumed. Each
micro-batch reads only the files added by the new commits (never the whole table), and admission
control (``maxFilesPerTrigger``) admits whole commits, so batch boundaries follow the upstream
table's commits deterministically. Register with :func:`register` and read with
``spark.readStream.format("lakehouse_delta").schema(...).option("path", ...)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

FORMAT = "lakehouse_delta"


@dataclass
class FilePartition(InputPartition):
    files: list[tuple[str, dict]]  # (absolute parquet path, partition values)


class DeltaStreamSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        raise ValueError(f"{FORMAT}: give the table schema with .schema(...) when reading")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DeltaStreamReader(schema, self.options)


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, schema: StructType, options: dict):
        if "path" not in options:
            raise ValueError(f"{FORMAT}: option 'path' (the Delta table) is required")
        self.schema = schema
        self.path = str(options["path"])
        max_files = options.get("maxFilesPerTrigger")
        self.max_files = int(max_files) if max_files else None
        self._target: int | None = None
        self._adds: dict[int, list[dict]] = {}

    def _files(self, version: int) -> list[dict]:
        from include.storage.delta import commit_files

        if version not in self._adds:
            self._adds[version] = commit_files(self.path, version)
        return self._adds[version]

    def initialOffset(self) -> dict:
        return {"version": -1}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        from include.storage.delta import latest_version

        self._target = latest_version(self.path)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from include.storage.delta import latest_version

        end = self._target if self._target is not None else latest_version(self.path)
        version, files = int(start["version"]), 0
        while version < end:
            n = len(self._files(version + 1))
            if isinstance(limit, ReadMaxFiles) and files > 0 and files + n > limit.max_files:
                break
            version, files = version + 1, files + n
            if isinstance(limit, ReadMaxFiles) and files >= limit.max_files:
                break
        return {"version": version}

    def reportLatestOffset(self) -> dict | None:
        from include.storage.delta import latest_version

        return {"version": latest_version(self.path)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts = []
        for version in range(int(start["version"]) + 1, int(end["version"]) + 1):
            for add in self._files(version):
                file_path = str(Path(self.path) / unquote(add["path"]))
                parts.append(FilePartition([(file_path, add.get("partitionValues") or {})]))
        return parts

    def read(self, partition: FilePartition) -> Iterator:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema

        target = to_arrow_schema(self.schema, timezone="UTC")
        for file_path, partition_values in partition.files:
            table = pq.read_table(file_path)
            for name, value in partition_values.items():
                if name not in table.column_names:
                    column = pa.array([value] * table.num_rows, pa.string()).cast(target.field(name).type)
                    table = table.append_column(name, column)
            yield from table.select(target.names).cast(target).to_batches()

    def commit(self, end: dict) -> None:
        for version in [v for v in self._adds if v <= int(end["version"])]:
            del self._adds[version]


def register(spark) -> None:
    """Make the ``lakehouse_delta`` format available in this session."""
    spark.dataSource.register(DeltaStreamSource)
