"""The RocksDB state files of a checkpoint, read without Spark: bytes and keys per state partition.

A RocksDB state store commits, per partition, a snapshot (`<version>.zip`, whose `metadata` lists the SST files
it references, with their sizes, and the number of keys) and, with changelog checkpointing, changelogs
(`<version>.changelog`) between snapshots. A stream-stream join keeps one store per subdirectory of a partition.
The key counts are those of the latest snapshot at or before the version (changelogs since are not replayed).
"""

from __future__ import annotations

import io
import json
import statistics
import zipfile
from dataclasses import dataclass

from include.storage.paths import StoragePath


@dataclass(frozen=True)
class PartitionFiles:
    bytes: int  # the snapshot, the SST files it references and the changelogs since
    keys: int  # keys of the snapshot (every store and column family of the partition)


def _stores(partition: StoragePath) -> list[StoragePath]:
    stores = [d for d in partition.iterdir() if d.is_dir() and d.name != "SSTs" and not d.name.startswith("_")]
    return stores or [partition]


def partition_files(partition: StoragePath, version: int) -> PartitionFiles:
    """Bytes and keys of one state partition at `version` (zeros when it holds nothing yet)."""
    if not partition.is_dir():
        return PartitionFiles(0, 0)
    size = keys = 0
    for store in _stores(partition):
        snapshots = sorted(int(f.stem) for f in store.glob("*.zip") if f.stem.isdigit() and int(f.stem) <= version)
        base = snapshots[-1] if snapshots else 0
        if snapshots:
            archive = store / f"{base}.zip"
            size += archive.stat().st_size
            with zipfile.ZipFile(archive if archive.is_local else io.BytesIO(archive.read_bytes())) as snapshot:
                metadata = json.loads(snapshot.read("metadata").decode().split("\n", 1)[1])
            size += sum(f["sizeBytes"] for f in metadata.get("sstFiles", []))
            keys += int(metadata.get("numKeys", 0))
        size += sum(f.stat().st_size for f in store.glob("*.changelog") if f.stem.isdigit() and base < int(f.stem) <= version)
    return PartitionFiles(size, keys)


def operator_partitions(checkpoint: StoragePath, version: int) -> dict[int, list[PartitionFiles]]:
    """Per state operator id, its partitions' files at `version` (state version = batch id + 1)."""
    state = checkpoint / "state"
    if not state.is_dir():
        return {}
    operators = {}
    for operator in sorted((d for d in state.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
        partitions = max((int(p.name) for p in operator.iterdir() if p.name.isdigit()), default=-1)
        operators[int(operator.name)] = [partition_files(operator / str(p), version) for p in range(partitions + 1)]
    return operators


def skew(keys_per_partition: list[int]) -> float:
    """Max / median keys per partition (the median floored at 1, so that mostly empty partitions still rank)."""
    if not keys_per_partition:
        return 0.0
    return round(max(keys_per_partition) / max(statistics.median(keys_per_partition), 1), 2)
