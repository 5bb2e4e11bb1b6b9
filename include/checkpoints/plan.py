"""What a job's checkpoint depends on (its fingerprint), and what a change to the registry needs.

When a job's checkpoint is created, the job records the fingerprint of its stateful definition in
`<checkpoint>/lakehouse_fingerprint.json`. Before every start the fingerprint is compared with the
registry and each changed field is classified:

- ``resume``: nothing stateful changed (admission limits, triggers, supervision, quality, docs);
- ``evolve``: a job that passes its rows through (parse_json, deduplicate) gains nullable output columns (a
  source's new field, or bronze's rescued column), or has one widened, renamed (`renamed_from`) or dropped: its state
  does not hold them, so the job's next start changes its sink table in place (audited) and goes on from its
  checkpoint; nothing is read again. A job that refers to a column renamed upstream by its new name, not as a key,
  evolves too (its state holds no column name). Not destructive, so no person needs to approve it: the start applies
  it (:func:`schema_change` and :func:`transform_change` decide);
- ``repartition``: only the shuffle partitions (the state is partitioned by them): the state can be
  moved to the new count offline, nothing is reprocessed;
- ``reset-checkpoint``: an input was replaced (another table or landing path, its change feed, its
  partitioning): keep the sink table, start a new checkpoint at a chosen source position;
- ``full-refresh``: keys, windows, gap, join, watermarks, aggregations, the sink, an output column retyped otherwise
  than widened, a rename of a column the state is keyed on (or any output change of a job whose state holds its
  rows): state and table must be rebuilt from all source data, and so must every job downstream.

A job reading Kafka is also checked against its topics on the broker (given the settings): partitions added
since the checkpoint are read from their start (``resume``, said in the note); a topic deleted and re-created,
partitions lost, or unread messages deleted by retention (unless the source allows data loss) need
``reset-checkpoint`` at a chosen position (include/checkpoints/kafka_offsets.py).

The plan's mode is the most demanding one among the changes.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, Field, asdict, dataclass, fields, is_dataclass
from typing import Any

from include import checkpoints
from include.checkpoints.cdc_refresh import refresh_reads
from include.checkpoints.changes import TRANSFORM_REBUILT, schema_change, transform_change
from include.checkpoints.journal import pending_for_checkpoint
from include.checkpoints.kafka_offsets import check_checkpoint
from include.kafka.broker import BrokerError
from include.kafka.connection import bootstrap_servers
from include.registry import (
    PROCESSORS,
    JobSpec,
    Registry,
    StatefulProcess,
    StreamJoin,
)
from include.settings import Settings
from include.storage.paths import StoragePath

MODES = ("resume", "evolve", "repartition", "reset-checkpoint", "full-refresh")
STARTABLE = ("resume", "evolve")  # a job starts on these plans (it applies `evolve` itself)
PENDING = "action pending"  # an unfinished checkpoint action names the job (include.checkpoints.journal)
FINGERPRINT_FILE = "lakehouse_fingerprint.json"
START_FILE = "lakehouse_start.json"  # where a reset checkpoint's Delta sources start
FINGERPRINT_VERSION = 1
DELTA_POSITIONS = "--from-latest|--from-version V|--from-timestamp T"
KAFKA_POSITIONS = "--from-earliest|--from-latest|--from-timestamp T"

# fingerprint field -> (mode its change needs, why)
FIELDS: dict[str, tuple[str, str]] = {
    "kind": ("full-refresh", "the transform kind decides what the state holds"),
    "transform": ("full-refresh", TRANSFORM_REBUILT),
    "watermarks": ("full-refresh", "the watermark decides which rows are dropped as late and when state is evicted"),
    "output_schema": ("full-refresh", "the state and the sink table hold rows of this schema"),
    "sink": ("full-refresh", "the sink table, its mode, merge keys or partitioning changed"),
    "sources": ("reset-checkpoint", "an input was replaced: the checkpoint's offsets point into another input"),
    "shuffle_partitions": ("repartition", "the state is partitioned by the shuffle partitions"),
    "processor_state": ("full-refresh", "the processor keeps its state in another layout (its state_version in "
                                        "include/registry/processors.py)"),
}


def fingerprint(job: JobSpec, registry: Registry) -> dict[str, Any]:
    """The parts of `job`'s definition its checkpoint (offsets and state) depends on."""
    # an initial state seeds a new checkpoint only: an existing one does not depend on it
    transform = {k: v for k, v in _compact(job.transform).items() if k not in ("right", "initial_state_table")}
    if isinstance(job.transform, StreamJoin):
        transform["right"] = job.transform.right.name
    sources = []
    for source in job.sources:
        writer = registry.writer_of(source.name) if source.kind == "delta" else None
        sources.append({"kind": source.kind, "name": source.name, "path": source.path,
                        "read_change_feed": source.read_change_feed,
                        "partition_by": list(writer.sink.partition_by) if writer else []})
    return {
        "kind": job.transform.kind,
        "transform": json.loads(json.dumps(transform)),
        "watermarks": {s.name: {"event_time": s.event_time, "seconds": s.watermark_seconds} for s in job.sources},
        "output_schema": dict(job.output_schema),
        "sink": {"table": job.sink.table, "mode": job.sink.mode, "merge_keys": list(job.sink.merge_keys),
                 "partition_by": list(job.sink.partition_by), "quarantine_table": job.sink.quarantine_table},
        "sources": sources,
        # the state is partitioned by it; a stateless job has no state to move
        "shuffle_partitions": job.state_store.shuffle_partitions if job.stateful else None,
        "processor_state": (PROCESSORS[job.transform.processor].state_version
                            if isinstance(job.transform, StatefulProcess) else None),
    }


def _compact(value: Any) -> Any:
    """A spec as plain data, without the fields at their default: a field added later leaves the fingerprints of
    checkpoints made before it unchanged."""
    if is_dataclass(value):
        return {f.name: _compact(getattr(value, f.name)) for f in fields(value) if not _at_default(f, getattr(value, f.name))}
    if isinstance(value, list | tuple):
        return [_compact(v) for v in value]
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items()}
    return value


def _at_default(spec_field: Field, value: Any) -> bool:
    if spec_field.default is not MISSING:
        return value == spec_field.default
    return spec_field.default_factory is not MISSING and value == spec_field.default_factory()


def fingerprint_path(checkpoint: StoragePath) -> StoragePath:
    return checkpoint / FINGERPRINT_FILE


def read_fingerprint(checkpoint: StoragePath) -> dict[str, Any] | None:
    """The recorded fingerprint, or None for a checkpoint made before fingerprints were kept."""
    path = fingerprint_path(checkpoint)
    try:
        return json.loads(path.read_text())["fingerprint"]
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is corrupt ({exc}); it records what the checkpoint depends on: move the "
                         "checkpoint aside and rebuild the job, or restore the file") from exc


def write_fingerprint(checkpoint: StoragePath, print_: dict[str, Any]) -> None:
    fingerprint_path(checkpoint).write_text(  # whole: a rename locally, one PUT on S3
        json.dumps({"version": FINGERPRINT_VERSION, "fingerprint": print_}, indent=2, sort_keys=True))


@dataclass(frozen=True)
class Change:
    field: str
    before: Any
    after: Any
    mode: str
    reason: str


@dataclass(frozen=True)
class Plan:
    job: str
    mode: str
    changes: tuple[Change, ...] = ()
    downstream: tuple[str, ...] = ()  # jobs that must follow a full refresh
    note: str = ""
    positions: str = DELTA_POSITIONS  # where a reset-checkpoint of this job may start

    @property
    def startable(self) -> bool:
        """Whether the job may start on this plan (it applies an `evolve` plan itself)."""
        return self.mode in STARTABLE

    @property
    def command(self) -> str:
        """The command that applies the plan ('' for resume and evolve: the job's next start applies it)."""
        if self.startable:
            return ""
        if self.mode == PENDING:
            return f"lakehouse checkpoint resume-action {self.job}"
        position = f" {self.positions}" if self.mode == "reset-checkpoint" else ""
        cascade = " --cascade" if self.downstream else ""
        return f"lakehouse checkpoint {self.mode} {self.job}{position}{cascade}"

    def render(self) -> str:
        lines = [f"{self.job}: {self.mode}" + (f" ({self.note})" if self.note else "")]
        for change in self.changes:
            lines.append(f"  - {change.field}: {_short(change.before)} -> {_short(change.after)}: {change.mode}, "
                         f"{change.reason}")
        if self.downstream:
            lines.append(f"  downstream jobs to rebuild too: {', '.join(self.downstream)}")
        if self.command:
            lines.append(f"  apply with: {self.command}")
        elif self.mode == "evolve":
            lines.append("  applied by the job's next start (not destructive: no approval needed)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "command": self.command}


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def plan_job(job: JobSpec, registry: Registry, checkpoint: StoragePath, recorded: dict[str, Any] | None = None,
             pinned_partitions: int | None = None, inside_action: str | None = None,
             settings: Settings | None = None) -> Plan:
    """The plan for starting `job` on `checkpoint` with the registry as it is now.

    `recorded` is the checkpoint's fingerprint (read from it when None); `pinned_partitions` the shuffle
    partitions Spark pinned in its offset log (for checkpoints made before fingerprints were kept);
    `inside_action` the id of the checkpoint action that runs the job (its own journal does not block it);
    `settings` (where the broker is) lets a Kafka job's offsets be checked against its topics.
    """
    journal = pending_for_checkpoint(checkpoint, job.id)
    if journal is not None and journal.id != inside_action:
        return Plan(job.id, PENDING, note=journal.describe(job.id))
    if not (checkpoint / "offsets").is_dir():
        return Plan(job.id, "resume", note="no checkpoint yet: the job starts from the beginning of its inputs")
    recorded = recorded if recorded is not None else read_fingerprint(checkpoint)
    current = fingerprint(job, registry)
    pinned = pinned_partitions if pinned_partitions is not None else checkpoints.shuffle_partitions(checkpoint)
    note = ""
    if recorded is None:  # an older checkpoint: only what Spark pinned can be compared
        recorded = {**current, "shuffle_partitions": pinned if job.stateful and pinned else current["shuffle_partitions"]}
        note = "checkpoint without a fingerprint: only its shuffle partitions were compared"
    changes = tuple(
        Change(name, recorded.get(name), current[name], *_field_change(job, name, recorded.get(name), current[name]))
        for name in FIELDS if recorded.get(name) != current[name]
    )
    kafka = [source for source in job.sources if source.kind == "kafka"]
    positions = KAFKA_POSITIONS if kafka else DELTA_POSITIONS
    if kafka and settings is not None:
        topic_changes, topic_notes = _kafka_changes(settings, kafka, checkpoint)
        changes += topic_changes
        note = "; ".join(filter(None, (note, *topic_notes)))
    mode = max((c.mode for c in changes), key=MODES.index, default="resume")
    downstream = tuple(downstream_jobs(registry, job.id)) if mode == "full-refresh" else ()
    if mode == "full-refresh" and settings is not None:
        note = "; ".join(filter(None, (note, _refresh_note(settings, job))))
    return Plan(job.id, mode, changes, downstream, note, positions)


def _field_change(job: JobSpec, name: str, before: Any, after: Any) -> tuple[str, str]:
    if name == "output_schema":
        return schema_change(job, before, after)
    if name == "transform":
        return transform_change(job, before, after)
    return FIELDS[name]


@dataclass(frozen=True)
class OutputEdits:
    """What an `evolve` plan changes in the job's sink table, by column."""

    added: dict[str, str]  # column -> type
    widened: dict[str, tuple[str, str]]  # column -> (type before, type after)
    renamed: dict[str, str]  # new name -> former name
    dropped: tuple[str, ...]

    def describe(self) -> list[str]:
        """One phrase per kind of edit, for the audit and the log."""
        return [text for text, edits in (
            (f"added {', '.join(f'{c} ({t})' for c, t in self.added.items())}", self.added),
            (f"widened {', '.join(f'{c} ({a} -> {b})' for c, (a, b) in self.widened.items())}", self.widened),
            (f"renamed {', '.join(f'{old} to {new}' for new, old in self.renamed.items())}", self.renamed),
            (f"dropped {', '.join(self.dropped)}", self.dropped)) if edits]


def output_edits(plan: Plan, job: JobSpec) -> OutputEdits:
    """The edits of `job`'s sink table its `evolve` plan makes (none for another plan)."""
    added, widened, renamed, dropped = {}, {}, {}, []
    for change in (c for c in plan.changes if c.field == "output_schema" and c.mode == "evolve"):
        before, after = change.before, change.after
        renames = {new: old for new, old in job.renamed_columns.items() if old in before and new not in before}
        renamed.update(renames)
        dropped += [c for c in before if c not in after and c not in renames.values()]
        for column, ctype in after.items():
            was = before.get(renames.get(column, column))
            if was is None:
                added[column] = ctype
            elif was != ctype:
                widened[column] = (was, ctype)
    return OutputEdits(added, widened, renamed, tuple(dropped))


def _refresh_note(settings: Settings, job: JobSpec) -> str:
    """What a full refresh of a CDC job reads again, and whether it takes a new snapshot first (cdc_refresh)."""
    try:
        return refresh_reads(settings, job)[1]
    except BrokerError as exc:
        return f"whether the topic still holds every change was not checked: {exc}"


def _kafka_changes(settings: Settings, sources: list, checkpoint: StoragePath) -> tuple[tuple[Change, ...], list[str]]:
    """The changes (and notes) the checkpoint's Kafka offsets need against the topics on the broker."""
    changes, notes = [], []
    for source in sources:
        bootstrap = bootstrap_servers(settings, source.kafka.connection)
        try:
            check = check_checkpoint(bootstrap, source.kafka.topics, checkpoint, source.kafka.fail_on_data_loss)
        except BrokerError as exc:
            notes.append(f"Kafka offsets not checked: {exc}")
            continue
        notes.extend(check.notes)
        changes.extend(Change("kafka offsets", check.read, check.on_broker, "reset-checkpoint", problem)
                       for problem in check.problems)
    return tuple(changes), notes


def downstream_jobs(registry: Registry, job_id: str) -> list[str]:
    """Every job that reads, directly or not, a table `job_id` writes (dependency order)."""
    affected = {job_id}
    for other in registry.order:
        if other != job_id and affected & set(registry.upstream(other)):
            affected.add(other)
    return [j for j in registry.order if j in affected and j != job_id]


class PlanRequired(ValueError):
    """A job whose plan is not `resume` may not start: the message is the plan and its command."""

    def __init__(self, plan: Plan):
        self.plan = plan
        topics = [c.reason for c in plan.changes if c.field == "kafka offsets"]
        if topics and len(topics) == len(plan.changes):  # nothing in the registry changed: the topic did
            super().__init__(
                f"job {plan.job!r} cannot resume its checkpoint: {'; '.join(topics)}; ways out: `{plan.command}` "
                f"(keeps its tables), or `lakehouse checkpoint full-refresh {plan.job}` (rebuilds them)")
            return
        super().__init__(
            f"job {plan.job!r} cannot resume its checkpoint: the registry changed what its state depends on; "
            f"apply the plan with `{plan.command}` first\n{plan.render()}"
        )


def read_start_position(checkpoint: StoragePath) -> dict[str, str] | None:
    """Delta source options (startingVersion / startingTimestamp) a reset left for a new checkpoint."""
    try:
        return json.loads((checkpoint / START_FILE).read_text())
    except FileNotFoundError:
        return None


AFTER_VERSIONS = "after_versions"  # in a --from-latest start: each source table's latest version at the reset


def delta_start_options(start: dict[str, Any], table: str, latest_version: int) -> dict[str, str]:
    """The Delta source options of a new checkpoint's start position for `table` (at `latest_version` now).
    ``startingVersion=latest`` is resolved by Delta when the first batch is planned, which an available-now run with
    nothing new does not do: after commits since the reset it is the version after the one latest at the reset."""
    options = {k: v for k, v in start.items() if k != AFTER_VERSIONS}
    after = start.get(AFTER_VERSIONS, {}).get(table)
    if options.get("startingVersion") == "latest" and after is not None and latest_version > after:
        return {"startingVersion": str(after + 1)}
    return options


def write_start_position(checkpoint: StoragePath, options: dict[str, Any]) -> None:
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / START_FILE).write_text(json.dumps(options))
