"""Each checkpoint action's rules, decided before anything is touched and without Spark: which jobs it touches, what
it checks (refusing with one line what may not run), how it reads to the person who approves it, and how to undo it.
spark_jobs.checkpoint_actions adds each mode's steps; the approval preview (include/checkpoints/preview.py) reads
these alone.

- full-refresh: empty the job's sink tables (a new Delta version each; history kept), start a new checkpoint, and
  rebuild from all source data, upstream first. Jobs downstream of a target read what it rebuilds, so they must be
  rebuilt too (`--cascade`).
- reset-checkpoint: keep the sink table, move the checkpoint aside, and start a new one at a position of the job's
  source tables (a version, a timestamp, or the latest) or of its Kafka topics (the earliest offsets, a timestamp,
  or the latest): what lies between the old position and the new one is missed or read again, and the description
  says which.
- repartition: move a stateful job's state to the registry's `state_store.shuffle_partitions` offline, with Spark's
  checkpoint repartition (nothing is reprocessed). The registry is the only source of the count.
- rollback: the job's checkpoint and every table it writes back to the pair batch B committed (see
  spark_jobs/checkpoint_actions/rollback.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from include import checkpoints
from include.checkpoints.actions import (
    ActionContext,
    ActionRefused,
    ModeRules,
    Prepared,
    put_back_text,
    restore_tables_text,
)
from include.checkpoints.cdc_refresh import NEW_SNAPSHOT, refresh_reads
from include.checkpoints.kafka_offsets import checkpoint_offsets
from include.checkpoints.ownership import own_rows_condition
from include.checkpoints.plan import AFTER_VERSIONS, downstream_jobs
from include.checkpoints.validate import CheckpointDamaged, check_state_version
from include.kafka.broker import BrokerError
from include.kafka.connection import bootstrap_servers
from include.kafka.offsets import require_topics
from include.kafka.offsets import starting_options as kafka_starting_options
from include.lineage.emitter import ensure_lineage_topic
from include.records import batch_ledger
from include.registry import JobSpec, Registry
from include.settings import Settings
from include.storage import delta as delta_store
from include.storage.paths import StoragePath


class FullRefreshRules(ModeRules):
    mode = "full-refresh"

    def targets(self, ctx: ActionContext) -> list[str]:
        jobs = [ctx.registry.job(j).id for j in ctx.request.jobs]
        downstream = [d for j in jobs for d in downstream_jobs(ctx.registry, j) if d not in jobs]
        if downstream and not ctx.request.get("cascade"):
            raise ActionRefused(
                f"full-refresh of {', '.join(jobs)} rebuilds tables that {', '.join(dict.fromkeys(downstream))} "
                "read: their state and tables would no longer match; add --cascade to rebuild them too")
        return [j for j in ctx.registry.order if j in jobs + downstream]

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        """A CDC job's: the logical databases to snapshot again first, and what its rebuild reads (cdc_refresh)."""
        try:
            databases, reads = refresh_reads(ctx.settings, job)
        except BrokerError as exc:
            raise ActionRefused(f"job {job.id!r}: whether its topic still holds every change was not checked ({exc}); "
                                "start the broker (`lakehouse kafka up`) and ask again") from None
        return {NEW_SNAPSHOT: databases, "reads": reads} if reads else {}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        emptied = ", ".join(t if (condition := own_rows_condition(ctx.registry, job, t)) is None
                            else f"its rows of {t} ({condition})" for t in job.tables_written())
        reads = f"; {prepared.data['reads']}" if prepared.data.get("reads") else ""
        return (f"move {ctx.checkpoint(job.id)} aside, empty {emptied} (a new Delta version each; the "
                f"history is kept) and rebuild them from all source data (available-now){reads}")


class ResetCheckpointRules(ModeRules):
    mode = "reset-checkpoint"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        kind, value = ctx.request.position
        if any(s.kind == "landing" for s in job.sources):
            raise ActionRefused(f"job {job.id!r} reads landing files, which have no versions to start from: use "
                                "full-refresh (it keeps no state worth keeping) or move new files in only")
        if any(s.kind == "kafka" for s in job.sources):
            return {"starting": kafka_position(ctx, job, kind, value)}
        if kind == "earliest":
            raise ActionRefused(f"job {job.id!r} reads Delta tables: --from-earliest is for Kafka sources; use "
                                "--from-version (e.g. 0), --from-timestamp or --from-latest")
        if kind == "version" and len(job.sources) > 1:
            raise ActionRefused(f"job {job.id!r} reads {len(job.sources)} tables: --from-version names a version "
                                "of one table; use --from-timestamp or --from-latest")
        for source in job.sources:
            check_position(ctx.settings.layout.table(source.name), source.name, kind, value, job.id)
        starting = starting_options(kind, value)
        if kind == "latest":  # the versions now: a first batch planned after more commits starts after these

            starting[AFTER_VERSIONS] = {s.name: delta_store.latest_version(ctx.settings.layout.table(s.name))
                                        for s in job.sources}
        return {"starting": starting}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        return f"move {ctx.checkpoint(job.id)} aside; keep {job.sink.table}; " + position_effect(ctx, job)

    def undo(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        return (f"{put_back_text(ctx, prepared)}; once the new checkpoint has run, also "
                f"{restore_tables_text(ctx.settings, job)}")


def kafka_position(ctx: ActionContext, job: JobSpec, kind: str, value: Any) -> dict[str, str]:
    """Kafka reader options of a new checkpoint at the position, once the broker and the topics answer."""
    if kind == "version":
        raise ActionRefused(f"job {job.id!r} reads a Kafka topic, which has no versions: use --from-earliest, "
                            "--from-timestamp or --from-latest")
    for source in job.sources:
        try:
            bootstrap = bootstrap_servers(ctx.settings, source.kafka.connection)
            ensure_lineage_topic(ctx.settings, bootstrap, source.kafka.topics)
            require_topics(bootstrap, source.kafka.topics)
        except BrokerError as exc:
            raise ActionRefused(f"job {job.id!r}: {exc}") from None
    return kafka_starting_options(value if kind == "timestamp" else kind)


def check_position(table: StoragePath, name: str, kind: str, value: Any, job_id: str) -> None:
    """Refuse a position Delta's streaming source could not start from: a version the table does not have (or its
    log no longer keeps), a time after its latest commit."""
    if not delta_store.table_exists(table):
        raise ActionRefused(f"job {job_id!r}: its source table {name} does not exist yet: nothing to start from")
    commits = sorted(int(p.stem) for p in (table / "_delta_log").glob("*.json") if p.stem.isdigit())
    first, latest = commits[0], commits[-1]
    if kind == "version" and not first <= value <= latest:
        kept = f"versions {first}..{latest}" if first else f"versions 0..{latest}"
        raise ActionRefused(f"job {job_id!r}: --from-version {value}: {name} has {kept} in its log; choose one of "
                            "them, or --from-latest")
    if kind == "timestamp":
        moment = datetime.fromisoformat(value)
        committed = {v: datetime.fromtimestamp((table / "_delta_log" / f"{v:020d}.json").stat().st_mtime, UTC)
                     for v in (first, latest)}
        if moment > committed[latest]:
            raise ActionRefused(f"job {job_id!r}: --from-timestamp {value}: no version of {name} was committed at or "
                                f"after it (its latest, version {latest}, at {committed[latest].isoformat()}); use "
                                "--from-latest to read only what comes next")
        if first > 0 and moment < committed[first]:
            raise ActionRefused(f"job {job_id!r}: --from-timestamp {value}: {name}'s log keeps versions from "
                                f"{first} (committed {committed[first].isoformat()}) only; choose a later time")


def starting_options(kind: str, value: Any) -> dict[str, str]:
    """Delta source options of a new checkpoint starting at the position."""
    if kind == "version":
        return {"startingVersion": str(value)}
    if kind == "timestamp":
        return {"startingTimestamp": str(value)}
    return {"startingVersion": "latest"}


def position_effect(ctx: ActionContext, job: JobSpec) -> str:
    """What a reset to the requested position may miss or repeat, per source table, in plain words."""
    kind, value = ctx.request.position
    if any(s.kind == "kafka" for s in job.sources):
        return kafka_effect(ctx, job, kind, value)
    checkpoint = ctx.checkpoint(job.id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    offsets = [json.loads(o) for o in checkpoints.source_offsets(checkpoint, batch)] if batch is not None else []
    parts = []
    for source, offset in zip(job.sources, offsets or [{}] * len(job.sources), strict=False):
        unread = next_unread(offset)  # the first version the old checkpoint had not read (whole)
        latest = delta_store.latest_version(ctx.settings.layout.table(source.name))
        done = (f"the old checkpoint had read {source.name} up to version {unread - 1}" if unread
                else f"the old checkpoint had not read {source.name}")
        if kind == "latest":
            effect = (f"versions {unread}..{latest} are NOT read (missed)" if unread <= latest
                      else "nothing committed so far is missed (it had read every version)")
        elif kind == "timestamp":
            effect = (f"it starts at the first version committed at or after {value}: versions "
                      "between the old position and that one are missed, versions before the old position read again")
        elif value > unread:
            effect = f"versions {unread}..{value - 1} are NOT read (missed)"
        elif value == unread:
            effect = "it goes on where the old one stopped: nothing is missed or read twice"
        else:
            effect = (f"versions {value}..{unread - 1} are read again: their rows are written to {job.sink.table} "
                      "again")
        parts.append(f"{done}; from now on {effect}")
    return "; ".join(parts)


def kafka_effect(ctx: ActionContext, job: JobSpec, kind: str, value: Any) -> str:
    """What a reset of a Kafka job to the position may miss or repeat, against what the old checkpoint had read."""
    read = checkpoint_offsets(ctx.checkpoint(job.id))
    done = ("the old checkpoint had read " + "; ".join(f"{topic} up to offsets {offsets}" for topic, offsets in
                                                       read.items()) if read else "the old checkpoint had read nothing")
    effect = {
        "earliest": "every message still on the topic is read: messages the old checkpoint had read and the topic "
                    f"still holds are written to {job.sink.table} again (a re-created topic holds new messages only)",
        "latest": "only messages produced from now on are read: those not read yet are missed",
        "timestamp": f"each partition is read from its first message produced at or after {value}: messages between "
                     "the old position and that one are missed, those after it read again",
    }[kind]
    return f"{done}; from now on {effect}"


END_INDEX = 2**63 - 1  # Delta's offset index once a version's files are all read


def next_unread(offset: dict) -> int:
    """The first version a Delta source offset has not read in full (0 for a source never read)."""
    if "reservoirVersion" not in offset:
        return 0
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
    return version + 1 if index == END_INDEX else version


class RepartitionRules(ModeRules):
    mode = "repartition"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict:
        recorded = checkpoints.shuffle_partitions(ctx.checkpoint(job.id))
        if recorded is None:
            raise ActionRefused(f"job {job.id!r} has no checkpoint at {ctx.checkpoint(job.id)}: nothing to repartition")
        if not job.stateful:
            raise ActionRefused(f"job {job.id!r} keeps no state: its shuffle partitions need no repartition")
        wanted = job.state_store.shuffle_partitions
        if recorded == wanted:
            raise ActionRefused(f"job {job.id!r}: its checkpoint already has {wanted} partitions, the registry's "
                                "state_store.shuffle_partitions (the only source of the count): nothing to "
                                "repartition; change the registry first")
        return {"partitions": wanted}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        checkpoint = ctx.checkpoint(job.id)
        return (f"copy {checkpoint} aside and repartition its state from {checkpoints.shuffle_partitions(checkpoint)} "
                f"to {prepared.data['partitions']} partitions (the registry's state_store.shuffle_partitions; "
                "nothing is reprocessed)")

    def undo(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:  # the tables are not touched
        return (f"{put_back_text(ctx, prepared)} and set state_store.shuffle_partitions back to "
                f"{checkpoints.shuffle_partitions(ctx.checkpoint(job.id))} in the registry")


class RollbackRefused(ActionRefused):
    """Batch B cannot be restored as asked."""


class RollbackRules(ModeRules):
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


RULES: dict[str, ModeRules] = {r.mode: r for r in (FullRefreshRules(), ResetCheckpointRules(), RepartitionRules(),
                                                    RollbackRules())}
