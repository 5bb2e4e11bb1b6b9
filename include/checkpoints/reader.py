"""Reading facts out of a Structured Streaming checkpoint directory (without Spark)."""

from __future__ import annotations

import json

from include.storage.paths import StoragePath


def query_id(checkpoint: StoragePath) -> str | None:
    """The streaming query id stored in `<checkpoint>/metadata`; stable across restarts."""
    try:
        return json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    except (FileNotFoundError, IndexError, KeyError, json.JSONDecodeError):
        return None


def batch_ids(directory: StoragePath) -> list[int]:
    """The batch ids of a checkpoint log directory (`offsets/`, `commits/`), ascending."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def latest_offsets_batch(checkpoint: StoragePath) -> int | None:
    batches = batch_ids(checkpoint / "offsets")
    return batches[-1] if batches else None


def latest_committed_batch(checkpoint: StoragePath) -> int | None:
    batches = batch_ids(checkpoint / "commits")
    return batches[-1] if batches else None


def stored_conf(checkpoint: StoragePath) -> dict[str, str]:
    """The SQL confs Spark pinned in the checkpoint's latest offset log entry."""
    batch = latest_offsets_batch(checkpoint)
    if batch is None:
        return {}
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    metadata = json.loads(lines[1]) if len(lines) > 1 else {}
    return dict(metadata.get("conf", {}))


def shuffle_partitions(checkpoint: StoragePath) -> int | None:
    """Shuffle partitions fixed in the checkpoint (state is partitioned by it), or None if new."""
    value = stored_conf(checkpoint).get("spark.sql.shuffle.partitions")
    return int(value) if value else None


def committed_watermark_ms(checkpoint: StoragePath) -> int | None:
    """The event-time watermark (epoch ms) of the latest committed batch, or None without one.

    Read from the offset log entry of the latest batch in `commits/`: that batch evicted (and, in
    append mode, emitted) every window ending at or before this watermark. Written by Spark before
    the batch ran, so it never lags behind like the asynchronous progress events can.
    """
    batch = latest_committed_batch(checkpoint)
    if batch is None:
        return None
    try:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return int(json.loads(lines[1])["batchWatermarkMs"])
    except (FileNotFoundError, IndexError, KeyError, ValueError):
        return None


def owed_watermark_batch(checkpoint: StoragePath) -> int | None:
    """The latest batch when it is committed, planned nothing after it, and moved the watermark on without a batch
    having run under the new watermark yet (that no-data batch evicts state and emits the windows it closes);
    else None.

    Spark plans such a batch only right after a batch of the same run: a process killed between the commit of the
    last data batch and the planning of the next one would otherwise leave those windows owed until new data comes.
    """
    batch = latest_committed_batch(checkpoint)
    if batch is None or latest_offsets_batch(checkpoint) != batch:
        return None  # nothing committed yet, or a planned batch that Spark runs (again) anyway
    try:
        commit = json.loads((checkpoint / "commits" / str(batch)).read_text().splitlines()[1])
        planned = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[1])
        return batch if int(commit["nextBatchWatermarkMs"]) > int(planned["batchWatermarkMs"]) else None
    except (FileNotFoundError, IndexError, KeyError, ValueError):
        return None


def source_offsets(checkpoint: StoragePath, batch: int) -> list[str]:
    """The raw source offsets (one JSON text per source) of batch `batch` in the offset log."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return lines[2:]


def written_by_python_delta_source(checkpoint: StoragePath) -> bool:
    """True when the latest offsets hold a ``{"version": n}`` offset: the project's former Python Delta
    source (removed with native Delta), which Delta's own streaming source cannot resume."""
    batch = latest_offsets_batch(checkpoint)
    if batch is None:
        return False
    for text in source_offsets(checkpoint, batch):
        try:
            offset = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(offset, dict) and set(offset) == {"version"}:
            return True
    return False


def file_log_offset(checkpoint: StoragePath, batch: int) -> int:
    """The file-source log offset (`logOffset`) batch `batch` read up to; -1 before the first batch."""
    if batch < 0:
        return -1
    texts = source_offsets(checkpoint, batch)
    return int(json.loads(texts[0]).get("logOffset", -1)) if texts and texts[0] not in ("", "-") else -1


def landing_files_of_batch(checkpoint: StoragePath, batch: int) -> list[str]:
    """The landing files (URIs) that batch `batch` of a file-source query admitted: entries of the source's
    file log (`sources/0/<n>`, or a `<n>.compact` holding all up to n) between the previous batch's
    `logOffset` and this batch's."""
    first, last = file_log_offset(checkpoint, batch - 1) + 1, file_log_offset(checkpoint, batch)
    log_dir = checkpoint / "sources" / "0"
    files: dict[str, None] = {}
    for n in range(first, last + 1):
        for name in (str(n), f"{n}.compact"):
            path = log_dir / name
            if not path.exists():
                continue
            for line in path.read_text().splitlines()[1:]:
                entry = json.loads(line)
                if first <= entry["batchId"] <= last:
                    files[entry["path"]] = None
    return list(files)


GENERATION_FILE = "lakehouse_generation"  # bumped by a rollback: the sink's idempotency key starts afresh


def writer_app_id(checkpoint: StoragePath, job_id: str) -> str | None:
    """The Delta app id (`txnAppId`) under which the job's query commits its batches: `<job>:<query id>`, plus
    `:g<n>` after the n-th rollback (a restored table keeps the later transaction records, which would make
    the re-run batches look committed). None without a query id."""
    query = query_id(checkpoint)
    if query is None:
        return None
    generation = writer_generation(checkpoint)
    return f"{job_id}:{query}" + (f":g{generation}" if generation else "")


def writer_generation(checkpoint: StoragePath) -> int:
    """How many rollbacks the checkpoint went through (0 when none)."""
    try:
        return int((checkpoint / GENERATION_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0
