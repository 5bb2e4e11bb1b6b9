"""Streaming checkpoints: facts read from a checkpoint directory without Spark (:mod:`.reader`), fingerprints and
plans (:mod:`.plan`), the checkpoint request and its modes (:mod:`.request`, :mod:`.modes`), action journals,
previews, validation, Kafka offsets (:mod:`.kafka_offsets`), what rows a job owns (:mod:`.ownership`). It may import
the records, the registry, storage, settings and the Kafka client; a Spark session only inside the functions that
need one.
"""

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
