"""Streaming checkpoints: facts read from a checkpoint directory without Spark (:mod:`.reader`)."""

from include.checkpoints.reader import (
    batch_ids,
    committed_watermark_ms,
    file_log_offset,
    landing_files_of_batch,
    latest_committed_batch,
    latest_offsets_batch,
    owed_watermark_batch,
    query_id,
    shuffle_partitions,
    source_offsets,
    stored_conf,
    writer_app_id,
    writer_generation,
    written_by_python_delta_source,
)

__all__ = [
    "batch_ids", "committed_watermark_ms", "file_log_offset", "landing_files_of_batch", "latest_committed_batch", "latest_offsets_batch", "owed_watermark_batch", "query_id", "shuffle_partitions",
    "source_offsets", "stored_conf", "writer_app_id", "writer_generation", "written_by_python_delta_source",
]
