"""The no-data batch a killed run owed: emitted again on the next start, as in an uninterrupted run."""

from __future__ import annotations

import logging

from include import checkpoints
from include.records import batch_ledger
from include.registry import JobSpec, Trigger
from include.settings import Settings
from spark_jobs.query_session import emits_on_watermark

log = logging.getLogger(__name__)


def replay_batch_owing_a_watermark(settings: Settings, job: JobSpec, trigger: Trigger) -> None:
    """When the last run ended (killed) after its last data batch committed but before Spark planned the no-data
    batch that emits what the new watermark closes, take that batch's commit back: Spark runs it again (the sink
    skips what it already wrote) and then plans the owed no-data batch, as in an uninterrupted run."""
    if not emits_on_watermark(job) or (trigger.available_now and job.processing_time_timers):
        return
    checkpoint = settings.layout.checkpoint(job.id)
    batch = checkpoints.owed_watermark_batch(checkpoint)
    if batch is None:
        return
    app_id = checkpoints.writer_app_id(checkpoint, job.id)
    if app_id is None or not batch_ledger.recorded(settings, job.id, app_id, batch):
        # written by an earlier writer generation (a rollback rewound to it): a replay under this one would write
        # its rows again; the next batch, with the input after it, plans the no-data batch as usual
        log.info("job=%s: batch %d was written by an earlier writer; not run again", job.id, batch)
        return
    log.warning("job=%s: batch %d moved the watermark on but the run ended before the batch that emits what it "
                "closes; running batch %d again (its rows are already written) so that Spark plans that batch",
                job.id, batch, batch)
    for name in (f".{batch}.crc", str(batch)):  # the checksum first: a crash in between leaves a readable log
        (checkpoint / "commits" / name).unlink(missing_ok=True)
