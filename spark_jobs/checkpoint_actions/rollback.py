"""rollback (`lakehouse checkpoint rollback <job> --to-batch B`): the job's checkpoint and every table it writes back to
the pair batch B committed, so that running the job again reproduces the rows it wrote after B.

- The tables: Delta `RESTORE ... TO VERSION AS OF` the versions `_ops/batch_ledger` recorded after batch B
  (a new version each; the history is kept).
- The checkpoint (copied aside first, like every action): the offset and commit logs after B, the state
  versions after B's, and the file-source log entries of later batches are removed; the writer's
  idempotency key moves to a new generation (a restored table keeps the later transaction records).
- Refused when B is not committed or no longer retained (offsets, state), when the ledger has no record of
  B, when the file-source log was compacted past B, and while a downstream job has read the versions
  being undone (roll it back first, or full-refresh it).
"""

from __future__ import annotations

import json
import re

from include import checkpoints
from include.checkpoints.reader import GENERATION_FILE
from include.checkpoints.validate import CheckpointDamaged, check_state_version
from include.ops import batch_ledger
from include.registry import JobSpec, Registry
from include.settings import Settings
from include.storage.paths import StoragePath
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ActionRefused,
    ModeAction,
    Prepared,
    Step,
    copy_aside,
)

_NUMBERED = re.compile(r"^\.?(\d+)(\.compact|\.changelog|\.zip|\.delta|\.snapshot)?(\.crc)?$")


class RollbackRefused(ActionRefused):
    """Batch B cannot be restored as asked."""


class Rollback(ModeAction):
    mode = "rollback"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict:
        shared = [t for t in job.tables_written() if len(ctx.registry.writers_of(t)) > 1]
        if shared:
            others = sorted({w.id for t in shared for w in ctx.registry.writers_of(t)} - {job.id})
            raise ActionRefused(f"job {job.id!r} shares {', '.join(shared)} with {', '.join(others)}: restoring the "
                                "table would undo their rows too; use full-refresh (it removes this job's rows only)")
        to_batch = ctx.request.get("to_batch")
        return {"to_batch": to_batch, "versions": rollback_versions(ctx.settings, ctx.registry, job, to_batch),
                "generation": checkpoints.writer_generation(ctx.checkpoint(job.id)) + 1}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        checkpoint, to_batch = ctx.checkpoint(job.id), prepared.data["to_batch"]
        restored = ", ".join(f"{t} to version {v}" for t, v in prepared.data["versions"].items())
        return (f"copy {checkpoint} aside; restore {restored}; remove batches {to_batch + 1}.."
                f"{checkpoints.latest_committed_batch(checkpoint)} from the checkpoint: running the job again re-runs "
                "them on the same input")

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        [item] = prepared
        job, data = ctx.registry.job(item.job), item.data
        tables = ", ".join(f"{t} to version {v}" for t, v in data["versions"].items())
        return [Step(job.id, "copy the checkpoint aside", lambda: copy_aside(ctx.settings, item)),
                Step(job.id, f"restore {tables}", lambda: restore_tables(ctx, job, data["versions"])),
                Step(job.id, f"cut the checkpoint back to batch {data['to_batch']} (writer generation "
                             f"{data['generation']})",
                     lambda: truncate_checkpoint(ctx.checkpoint(job.id), job, data["to_batch"], data["generation"]))]


def rollback_versions(settings: Settings, registry: Registry, job: JobSpec, to_batch: int) -> dict[str, int]:
    """Check that `job` can go back to `to_batch`; the {table: version} to restore."""
    checkpoint = settings.layout.checkpoint(job.id)
    committed = checkpoints.latest_committed_batch(checkpoint)
    offsets = checkpoints.batch_ids(checkpoint / "offsets")
    if committed is None or not (offsets and offsets[0] <= to_batch < committed):
        kept = f"batches {offsets[0]}..{committed - 1}" if offsets and committed is not None else "no batches"
        raise RollbackRefused(f"job {job.id!r}: cannot roll back to batch {to_batch}: the checkpoint can go back to "
                              f"{kept} (it keeps min_batches_to_retain batches; the last committed is {committed})")
    versions = batch_ledger.versions_after(settings, job.id, checkpoints.writer_app_id(checkpoint, job.id), to_batch)
    missing = [t for t in job.tables_written() if t not in versions]
    if missing:
        raise RollbackRefused(f"job {job.id!r}: _ops/batch_ledger has no versions of {', '.join(missing)} after "
                              f"batch {to_batch} of this checkpoint (batches run before the ledger existed)")
    if job.stateful:
        try:
            check_state_version(checkpoint, job, to_batch + 1)
        except CheckpointDamaged as exc:
            raise RollbackRefused(f"job {job.id!r}: the state of batch {to_batch} is no longer kept: {exc}") from None
    if any(s.kind == "landing" for s in job.sources):
        _check_file_log(checkpoint, job, to_batch)
    _check_downstream(settings, registry, job, versions)
    return versions


def _check_file_log(checkpoint: StoragePath, job: JobSpec, to_batch: int) -> None:
    keep_to = checkpoints.file_log_offset(checkpoint, to_batch)
    log_dir = checkpoint / "sources" / "0"
    compacts = [int(p.name.split(".")[0]) for p in log_dir.glob("*.compact")]
    base = max((c for c in compacts if c <= keep_to), default=-1)
    if any(not (log_dir / str(n)).exists() and n != base for n in range(base + 1, keep_to + 1)):
        raise RollbackRefused(f"job {job.id!r}: the file-source log of {checkpoint} was compacted past batch "
                              f"{to_batch}; roll back to a later batch, or rebuild with full-refresh")


def _check_downstream(settings: Settings, registry: Registry, job: JobSpec, versions: dict[str, int]) -> None:
    """Refuse while a reader of the job's tables has read a version that the rollback undoes."""
    ahead = []
    for reader in registry.jobs.values():
        for index, source in enumerate(reader.sources):
            if source.kind != "delta" or source.name not in versions:
                continue
            checkpoint = settings.layout.checkpoint(reader.id)
            batch = checkpoints.latest_offsets_batch(checkpoint)
            texts = checkpoints.source_offsets(checkpoint, batch) if batch is not None else []
            if index < len(texts) and texts[index] not in ("", "-"):
                read_to = json.loads(texts[index]).get("reservoirVersion", -1)
                if read_to > versions[source.name]:
                    ahead.append(f"{reader.id} (read {source.name} up to version {read_to})")
    if ahead:
        raise RollbackRefused(f"job {job.id!r}: rolling back to these versions {versions} would undo what "
                              f"{', '.join(ahead)} already read: roll those jobs back first (to a batch that read "
                              "no further), or full-refresh them afterwards")


def truncate_checkpoint(checkpoint: StoragePath, job: JobSpec, to_batch: int, generation: int) -> None:
    """Remove everything the checkpoint recorded after `to_batch` (logs, state versions, file-source entries), and
    start the writer's idempotency key at `generation` (a set, not an increment: running it twice is running it
    once)."""
    limits = {"offsets": to_batch, "commits": to_batch}
    if any(s.kind == "landing" for s in job.sources):
        limits["sources"] = checkpoints.file_log_offset(checkpoint, to_batch)
    for top, limit in limits.items():
        for path in (checkpoint / top).rglob("*") if (checkpoint / top).is_dir() else []:
            match = _NUMBERED.match(path.name)
            if path.is_file() and match and int(match.group(1)) > limit:
                path.unlink()
    state_version = to_batch + 1
    for path in (checkpoint / "state").rglob("*") if (checkpoint / "state").is_dir() else []:
        match = _NUMBERED.match(path.name)
        if path.is_file() and match and match.group(2) and int(match.group(1)) > state_version:
            path.unlink()
    (checkpoint / GENERATION_FILE).write_text(f"{generation}\n")


def restore_tables(ctx: ActionContext, job: JobSpec, versions: dict[str, int]) -> None:
    """RESTORE each table to its version (a new version; skipped where it is already there)."""
    from include.storage import delta as delta_store
    from spark_jobs.delta_tables import appends_opened

    for table, version in versions.items():
        path = ctx.settings.layout.table(table)
        if delta_store.latest_version(path) == version:
            continue
        with appends_opened(ctx.spark, path, job.sink.properties):
            ctx.spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {int(version)}")
