"""Schema changes without reprocessing: an `evolve` plan applied by the job's start, and a query restarted by itself
when a Delta table it reads changed its schema.

An `evolve` plan (include/checkpoints/plan.py) adds nullable columns to a pass-through job's sink table, or widens
a number column there (Delta's type widening); the start changes the table (spark_jobs.delta_tables.ensure_table),
then records the new fingerprint and an `_ops/checkpoint_audit`
row. Jobs reading that table see its new schema as Delta's streaming source sees any: the running query fails once
with a retryable schema-change error, and :func:`spark_jobs.streaming_query.run_job` starts it again with a new
DataFrame, from its checkpoint (one info line; no failure, alert or restart counted). Delta 4.4's source accepts a
widened type that way too (DELTA_SCHEMA_CHANGED_WITH_VERSION, then the wider type): without a schema tracking
location it needs no option; a job whose state is keyed on the column has a `full-refresh` plan instead.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

from include import checkpoints
from include.checkpoints.modes import next_unread
from include.checkpoints.plan import (
    Plan,
    added_columns,
    fingerprint,
    plan_job,
    widened_columns,
    write_fingerprint,
)
from include.records import checkpoint_audit
from include.registry import JobSpec, Registry, RegistryError, load_registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)

# Delta's streaming source: the table's schema changed since the query's DataFrame was made ("Please try
# restarting the query"). Restarted with a new DataFrame, an additive change reads on.
INPUT_GAINED = "LAKEHOUSE_INPUT_GAINED_COLUMNS"  # ours: see check_input_columns
SCHEMA_CHANGE_ERRORS = ("DELTA_SCHEMA_CHANGED", "DELTA_STREAMING_SCHEMA_MISMATCH_ON_RESTART", INPUT_GAINED)
ROW_CHANGE_ERROR = "DELTA_SOURCE_TABLE_IGNORE_CHANGES"  # a commit of a table it reads changed rows: a backfill?
SCHEMA_RESTARTS = 3  # restarts in a row without a committed batch before the change counts as incompatible
UNPLANNED_RETRY_SECONDS = 5.0  # a registry change seen before the run's first batch: judged again this often


class SourceSchemaChanged(RuntimeError):
    """The query stopped because a Delta table it reads has a new schema: start it again."""


class RegistryEvolved(RuntimeError):
    """A live run's job has an `evolve` plan under the registry as it is now: start it again with that registry."""

    def __init__(self, registry: Registry):
        super().__init__("the registry changes the job's output in place (columns added or widened)")
        self.registry = registry


def source_schema_changed(error: str, settings: Settings | None = None, job: JobSpec | None = None) -> bool:
    """The query failed on a new schema of a table it reads, or (given the job) on a backfill's commit there: a
    query started again reads on."""
    if any(code in error for code in SCHEMA_CHANGE_ERRORS):
        return True
    return ROW_CHANGE_ERROR in error and job is not None and bool(backfilled_sources(settings, job))


def check_input_columns(settings: Settings, job: JobSpec, columns: list[str]) -> None:
    """A batch lacks output `columns` of a pass-through job (written null while its input does not have them). When a
    Delta table it reads has them by now, the query's DataFrame predates them (Delta's source does not always notice
    a schema change made before it first reads the table): refuse the batch, so that the query starts again with a
    new DataFrame and reads them, instead of writing them null."""
    for source in job.sources:
        if source.kind != "delta":
            continue
        present = {f.name for f in delta_store.open_table(settings.layout.table(source.name)).schema().fields}
        gained = [c for c in columns if c in present]
        if gained:
            raise SourceSchemaChanged(f"{INPUT_GAINED}: {source.name} has gained {', '.join(gained)} since the "
                                      "query's DataFrame was made")


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
    """After the start added the plan's columns to the sink (`versions`: its tables' versions now, `versions_before`
    before the start): the checkpoint's new fingerprint, an audit row, one info line."""
    checkpoint = settings.layout.checkpoint(job.id)
    write_fingerprint(checkpoint, fingerprint(job, registry))
    batch = checkpoints.latest_committed_batch(checkpoint)
    changed = [f"added {', '.join(f'{c} ({t})' for c, t in added_columns(plan).items())}"] if added_columns(plan) else []
    if widened := widened_columns(plan):
        changed.append(f"widened {', '.join(f'{c} ({a} -> {b})' for c, (a, b) in widened.items())}")
    detail = (f"{' and '.join(changed)} in {job.sink.table} (version {versions.get(job.sink.table)}); the checkpoint "
              f"goes on from batch {batch}, nothing read again")
    checkpoint_audit.record(settings, [{
        "at": datetime.now(UTC), "actor": f"job:{job.id}", "job": job.id, "mode": "evolve", "dry_run": False,
        "outcome": "done", "detail": detail, "plan": json.dumps(plan.as_dict(), default=str),
        "batch_before": batch, "batch_after": batch, "versions_before": json.dumps(versions_before),
        "versions_after": json.dumps(versions), "archived_to": None}])
    log.info("job=%s: evolved: %s", job.id, detail)
