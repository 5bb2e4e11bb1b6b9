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

import re

from include import checkpoints
from include.checkpoints.modes import RollbackRules
from include.checkpoints.reader import GENERATION_FILE
from include.registry import JobSpec
from include.storage import delta as delta_store
from include.storage.paths import StoragePath
from spark_jobs.checkpoint_actions.base import ActionContext, ModeAction, Prepared, Step, copy_aside
from spark_jobs.delta_tables import appends_opened

_NUMBERED = re.compile(r"^\.?(\d+)(\.compact|\.changelog|\.zip|\.delta|\.snapshot)?(\.crc)?$")


class Rollback(RollbackRules, ModeAction):
    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        [item] = prepared
        job, data = ctx.registry.job(item.job), item.data
        tables = ", ".join(f"{t} to version {v}" for t, v in data["versions"].items())
        return [Step(job.id, "copy the checkpoint aside", lambda: copy_aside(ctx.settings, item)),
                Step(job.id, f"restore {tables}", lambda: restore_tables(ctx, job, data["versions"])),
                Step(job.id, f"cut the checkpoint back to batch {data['to_batch']} (writer generation "
                             f"{data['generation']})",
                     lambda: truncate_checkpoint(ctx.checkpoint(job.id), job, data["to_batch"], data["generation"]))]


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
    from delta.tables import DeltaTable


    for table, version in versions.items():
        path = ctx.settings.layout.table(table)
        if delta_store.latest_version(path) == version:
            continue
        with appends_opened(ctx.spark, path, job.sink.properties):
            DeltaTable.forPath(ctx.spark, str(path)).restoreToVersion(int(version))
