"""Schema changes without reprocessing: an `evolve` plan applied by the job's start, and a query restarted by itself
when a Delta table it reads changed its schema.

An `evolve` plan (include/checkpoints/plan.py) adds nullable columns to a pass-through job's sink table, widens a
number column there (Delta's type widening), or renames and drops columns (column mapping); the start changes the
table (spark_jobs.delta_tables.ensure_table), then records the new fingerprint and an `_ops/checkpoint_audit` row.
Jobs reading that table read it through a schema log in their checkpoint (spark_jobs.transforms.
schema_tracking_options): the commits before the change are read under the schema they were written with, the
running query stops once at the change (DELTA_STREAMING_METADATA_EVOLUTION) and :func:`spark_jobs.streaming_query.
run_job` starts it again, from its checkpoint, under the new schema (one info line; no failure, alert or restart
counted); a column read under its former name is renamed in the stream (spark_jobs.transforms.under_new_names). A
job whose state is keyed on the column has a `full-refresh` plan instead."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

from include import checkpoints
from include.checkpoints.modes import next_unread
from include.checkpoints.plan import (
    Plan,
    fingerprint,
    output_edits,
    plan_job,
    write_fingerprint,
)
from include.records import checkpoint_audit
from include.registry import JobSpec, Registry, RegistryError, load_registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)

# Delta's streaming source: the table's schema changed since the query's DataFrame was made ("Please try
# restarting the query"). Restarted with a new DataFrame, an additive change reads on.
# Delta's source with a schema log (spark_jobs.transforms.schema_tracking_options) wrote the schema of a rename, a drop
# or its first entry, and stops the query once so that it starts again under it: progress, not a failed restart.
SCHEMA_LOG_ADVANCED = "DELTA_STREAMING_METADATA_EVOLUTION"
SCHEMA_CHANGE_ERRORS = ("DELTA_SCHEMA_CHANGED", "DELTA_STREAMING_SCHEMA_MISMATCH_ON_RESTART", SCHEMA_LOG_ADVANCED)
ROW_CHANGE_ERROR = "DELTA_SOURCE_TABLE_IGNORE_CHANGES"  # a commit of a table it reads changed rows: a backfill?
SCHEMA_RESTARTS = 3  # restarts in a row without a committed batch before the change counts as incompatible
SCHEMA_LOG_RESTARTS = 20  # restarts for a schema log's new entries in one run, before they count as above
UNPLANNED_RETRY_SECONDS = 5.0  # a registry change seen before the run's first batch: judged again this often


class SourceSchemaChanged(RuntimeError):
    """The query stopped because a Delta table it reads has a new schema: start it again."""


class RegistryEvolved(RuntimeError):
    """A live run's job has an `evolve` plan under the registry as it is now: start it again with that registry."""

    def __init__(self, registry: Registry):
        super().__init__("the registry changes the job's output in place (columns added or widened)")
        self.registry = registry


class SchemaRestarts:
    """One run's restarts for a source's new schema. A schema log that moved on is progress (each of its entries
    once, up to SCHEMA_LOG_RESTARTS); any other restart notes the last committed batch, and SCHEMA_RESTARTS restarts
    in a row that committed no batch mean the change is not one the job can read on."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.log_advances = 0
        self.committed: list[int | None] = []  # the last committed batch at each restart that was not the log's

    def note(self, changed: SourceSchemaChanged, last_committed: int | None) -> None:
        """Count one restart; raise RuntimeError when the job cannot read on."""
        if SCHEMA_LOG_ADVANCED in str(changed) and self.log_advances < SCHEMA_LOG_RESTARTS:
            self.log_advances += 1
            return
        self.committed.append(last_committed)
        recent = self.committed[-SCHEMA_RESTARTS - 1:]
        if len(self.committed) > SCHEMA_RESTARTS and len(set(recent)) == 1:
            raise RuntimeError(f"job {self.job_id!r} failed: a table it reads changed its schema, and {SCHEMA_RESTARTS} "
                               f"restarts in a row committed no batch: the change is not one the job can read on "
                               f"(`lakehouse checkpoint plan {self.job_id}`): {changed}") from None


def source_schema_changed(error: str, settings: Settings | None = None, job: JobSpec | None = None) -> bool:
    """The query failed on a new schema of a table it reads, or (given the job) on a backfill's commit there: a
    query started again reads on."""
    if any(code in error for code in SCHEMA_CHANGE_ERRORS):
        return True
    return ROW_CHANGE_ERROR in error and job is not None and bool(backfilled_sources(settings, job))


class RegistryWatch:
    """A live run's view of the registry file: whether the job's plan under the file as it is now is `evolve` (the
    run then stops between batches and starts again with it). Other changes wait for the job's next start, as
    before; a registry that does not load is said once and leaves the run as it is."""

    def __init__(self, settings: Settings, job: JobSpec, registry: Registry):
        self.settings, self.job, self.registry = settings, job, registry
        self.path = settings.registry_path
        # None: the first poll reads the file, which may have changed before this run (a query restarted for its
        # source's new schema keeps the registry it had: an evolve written meanwhile must not be missed)
        self.seen: tuple[float, int] | None = None
        self.retry_at = 0.0

    def _stamp(self) -> tuple[float, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime, stat.st_size

    def evolved(self) -> Registry | None:
        """The changed registry when it gives the job an `evolve` plan, else None."""
        stamp = self._stamp()
        if stamp == self.seen or stamp is None or time.monotonic() < self.retry_at:
            return None
        self.seen = stamp
        try:
            registry = load_registry(self.path)
            job = registry.job(self.job.id)
        except (RegistryError, KeyError) as exc:
            log.warning("job=%s: the registry changed but does not load (%s); the run goes on as it started",
                        self.job.id, str(exc).splitlines()[0])
            return None
        if fingerprint(job, registry) == fingerprint(self.job, self.registry):
            return None
        checkpoint = self.settings.layout.checkpoint(job.id)
        plan = plan_job(job, registry, checkpoint, settings=self.settings)
        if plan.mode == "evolve":
            return registry
        if not (checkpoint / "offsets").is_dir():
            # the query has planned no batch yet (its plan reads `resume` whatever changed): judged again once it has
            self.seen, self.retry_at = None, time.monotonic() + UNPLANNED_RETRY_SECONDS
            return None
        if plan.mode == "resume":  # nothing its checkpoint depends on (e.g. a description, or another job's change)
            return None
        log.warning("job=%s: the registry changed what its checkpoint depends on (plan %s); the run goes on with "
                    "the definition it started with, and the plan applies when it is stopped", job.id, plan.mode)
        return None


def backfilled_sources(settings: Settings, job: JobSpec) -> frozenset[str]:
    """The Delta tables `job` reads whose row changes after its checkpoint's position are all backfills from
    `_rescued` (spark_jobs.rescued_backfill): its run passes over them (``skipChangeCommits``). A table with any other
    row change there (a DELETE, RESTORE, overwrite) is read as before: Delta's source fails on it, as it should."""
    from spark_jobs.rescued_backfill import BACKFILL_TAG

    checkpoint = settings.layout.checkpoint(job.id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    if batch is None:
        return frozenset()
    offsets = [json.loads(text) for text in checkpoints.source_offsets(checkpoint, batch)]
    skipped = set()
    for source in (s for s in job.sources if s.kind == "delta"):
        path = settings.layout.table(source.name)
        if not delta_store.table_exists(path):
            continue
        table_id = delta_store.open_table(path).metadata().id
        read = [next_unread(o) for o in offsets if o.get("reservoirId") == table_id]
        changes = delta_store.change_commits(path, min(read)) if read else {}
        if changes and all(tag == BACKFILL_TAG for tag in changes.values()):
            skipped.add(source.name)
    if skipped:
        log.info("job=%s: passes over the backfill commits of %s (their rows it has read; skipChangeCommits)",
                 job.id, ", ".join(sorted(skipped)))
    return frozenset(skipped)


def record_evolution(settings: Settings, registry: Registry, job: JobSpec, plan: Plan,
                     versions_before: dict[str, int], versions: dict[str, int]) -> None:
    """After the start changed the sink as the plan says (`versions`: its tables' versions now, `versions_before`
    before the start): the checkpoint's new fingerprint, an audit row, one info line."""
    checkpoint = settings.layout.checkpoint(job.id)
    write_fingerprint(checkpoint, fingerprint(job, registry))
    batch = checkpoints.latest_committed_batch(checkpoint)
    edits = output_edits(plan, job).describe()
    renames = ", ".join(f"{old} as {new}" for old, new in job.input_renames.items())
    what = (f"{' and '.join(edits)} in {job.sink.table} (version {versions.get(job.sink.table)})" if edits
            else f"reads {renames}, renamed upstream ({job.sink.table} unchanged)")
    detail = f"{what}; the checkpoint goes on from batch {batch}, nothing read again"
    checkpoint_audit.record(settings, [{
        "at": datetime.now(UTC), "actor": f"job:{job.id}", "job": job.id, "mode": "evolve", "dry_run": False,
        "outcome": "done", "detail": detail, "plan": json.dumps(plan.as_dict(), default=str),
        "batch_before": batch, "batch_after": batch, "versions_before": json.dumps(versions_before),
        "versions_after": json.dumps(versions), "archived_to": None}])
    log.info("job=%s: evolved: %s", job.id, detail)
