"""The typed, frozen specs the registry builds once from jobs.yaml and everything else reads.

One spec class per transform kind (as Apache Spark's declarative pipelines have one per flow):
the job builder (`spark_jobs`), the quality suites and the DAGs read these fields and never parse
the YAML again. Durations are whole seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from include.registry.cdc import ApplyChanges, CdcTable
from include.registry.durations import Trigger
from include.registry.processors import PROCESSORS


@dataclass(frozen=True)
class Admission:
    """How much one micro-batch admits from a source (None: no limit of that kind)."""

    max_files: int | None = None
    max_bytes: int | None = None
    max_offsets: int | None = None  # a Kafka source: messages per micro-batch, over all partitions


@dataclass(frozen=True)
class KafkaTopics:
    """Where a Kafka source reads: its topics on the broker of an Airflow connection."""

    topics: tuple[str, ...]
    connection: str = "kafka_default"  # LAKEHOUSE_KAFKA_BOOTSTRAP overrides its bootstrap.servers
    starting_offsets: str = "earliest"  # of a new checkpoint: earliest | latest | an ISO-8601 timestamp
    fail_on_data_loss: bool = True  # false: Spark goes on past lost offsets, each loss an _ops/alerts row


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "landing", "kafka" or "delta" (a CDC source reads its Kafka topic: "kafka", with `cdc` set)
    name: str  # landing or Kafka source name, or the upstream table
    path: str  # relative to LAKEHOUSE_ROOT (a Kafka source: its topics, comma-separated)
    format: str | None
    schema: dict[str, str]
    required: tuple[str, ...]
    event_time: str | None
    watermark_seconds: int | None
    max_files_per_trigger: int | None
    max_bytes_per_trigger: int | None = None
    read_change_feed: bool = False  # a Delta table read through its change data feed (an upserted table)
    backfill: Admission | None = None  # admission of available-now runs; None: the limits above
    max_line_bytes: int | None = None  # landing: longer lines are not read (quarantined as line_too_long)
    kafka: KafkaTopics | None = None  # a Kafka source's topics
    max_offsets_per_trigger: int | None = None  # a Kafka source's admission
    cdc: CdcTable | None = None  # a CDC source: the database table whose Debezium topic it reads
    # columns the producer renamed (new name -> former name): `renamed_from` in a landing or Kafka source's schema;
    # for a table, what its writer's output renamed
    renamed_from: dict[str, str] = field(default_factory=dict)

    def admission(self, available_now: bool) -> Admission:
        """The limits of a micro-batch under the given trigger. Spark's file source takes one of files and
        bytes: a landing source admitted by bytes has no file limit."""
        limits = Admission(self.max_files_per_trigger, self.max_bytes_per_trigger, self.max_offsets_per_trigger)
        if available_now and self.backfill is not None:
            limits = self.backfill
        if self.kind == "landing" and limits.max_bytes:
            return Admission(None, limits.max_bytes)
        return limits


@dataclass(frozen=True)
class Aggregation:
    name: str  # output column
    fn: str  # count, sum, min, max, avg
    column: str | None  # input column; count with a column counts its non-null values (as SQL), without one rows
    expr: tuple[str, str] | None = None  # or a SQL expression over the source's columns, with its type


@dataclass(frozen=True)
class ParseJson:
    """Landing JSON lines to typed rows; unparseable lines to the quarantine table."""

    kind: ClassVar[str] = "parse_json"


@dataclass(frozen=True)
class Deduplicate:
    """Drop rows whose keys were seen within the watermark."""

    keys: tuple[str, ...]
    kind: ClassVar[str] = "deduplicate"


@dataclass(frozen=True)
class WindowAggregate:
    """Tumbling (slide == window) or sliding event-time windows per key."""

    window_seconds: int
    slide_seconds: int
    keys: tuple[str, ...]
    aggregations: tuple[Aggregation, ...]
    offset_seconds: int = 0  # windows start at epoch + offset + k * slide (Spark's window startTime)
    key_expressions: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (SQL, type)
    kind: ClassVar[str] = "window_aggregate"


@dataclass(frozen=True)
class SessionAggregate:
    """Session windows per key, closed `gap_seconds` after their last event."""

    gap_seconds: int
    keys: tuple[str, ...]
    aggregations: tuple[Aggregation, ...]
    key_expressions: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (SQL, type)
    kind: ClassVar[str] = "session_aggregate"


@dataclass(frozen=True)
class RunningAggregate:
    """Totals per key over all time (no window): upserted as they change (update mode, one row per key)."""

    keys: tuple[str, ...]
    aggregations: tuple[Aggregation, ...]
    key_expressions: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (SQL, type)
    kind: ClassVar[str] = "running_aggregate"


@dataclass(frozen=True)
class JoinColumn:
    name: str  # output column
    side: str  # "left" or "right"
    column: str  # column of that side


@dataclass(frozen=True)
class StreamJoin:
    """Stream-stream join of the job's source (left) with `right`: right time in [left - before, left + within]."""

    right: SourceSpec
    join_keys: tuple[tuple[str, str], ...]  # (left column, right column)
    within_seconds: int
    how: str  # "inner", "left_outer", "right_outer" or "full_outer"
    where: str | None  # SQL filter on the left side
    matched_column: str | None  # boolean output column: a right row joined
    columns: tuple[JoinColumn, ...]
    before_seconds: int = 0  # the right time may precede the left time by this much
    kind: ClassVar[str] = "stream_join"

    def output_of(self, side: str) -> dict[str, str]:
        """{input column of `side`: output column}."""
        return {c.column: c.name for c in self.columns if c.side == side}


@dataclass(frozen=True)
class StatefulProcess:
    """Arbitrary per-key state: a processor of the project's catalogue (include/registry/processors.py) run by
    Spark's transformWithStateInPandas, its events handed over in event-time order (spark_jobs/processors)."""

    processor: str  # a name in PROCESSORS
    keys: tuple[str, ...]
    params: dict[str, int]  # every parameter of the processor (defaults filled in); durations in seconds
    initial_state_table: str | None = None  # a Delta table (layer/name) of state to start a new checkpoint from
    kind: ClassVar[str] = "stateful_process"


TransformSpec = (ParseJson | Deduplicate | WindowAggregate | SessionAggregate | StreamJoin | StatefulProcess
                 | RunningAggregate | ApplyChanges)
AGGREGATE_KINDS = (WindowAggregate, SessionAggregate)


@dataclass(frozen=True)
class MaintenanceSpec:
    """What `lakehouse maintain` does to a sink table: compaction, and VACUUM with this retention."""

    optimize: bool = True
    vacuum_retention_hours: int = 168  # Delta's default, 7 days; lower only when the registry says so


@dataclass(frozen=True)
class SinkSpec:
    table: str
    mode: str
    merge_keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    quarantine_table: str | None = None
    properties: dict[str, str] = field(default_factory=dict)  # Delta table properties (also of the quarantine)
    files_per_batch: int = 1  # data files per micro-batch commit (1: a downstream reader admits whole commits)
    maintenance: MaintenanceSpec = MaintenanceSpec()


MAX_SHUFFLE_PARTITIONS = 2000  # state-store partitions of one job: each is a RocksDB instance per batch


LIVE_ONLY = "live"  # state_store.changelog_checkpointing: changelogs in live runs, snapshots in available-now runs


@dataclass(frozen=True)
class StateStoreSpec:
    provider: str
    changelog_checkpointing: bool | str  # true, false or LIVE_ONLY
    shuffle_partitions: int
    min_batches_to_retain: int

    def changelog_in(self, trigger: Trigger | None) -> bool:
        """Whether a run under `trigger` commits its state as changelogs (None: a run that is not live, such as a
        checkpoint action's)."""
        if self.changelog_checkpointing == LIVE_ONLY:
            return trigger is not None and not trigger.available_now
        return bool(self.changelog_checkpointing)


@dataclass(frozen=True)
class HealthThresholds:
    """When a job's state health is breached (include/ops/health.py), besides state growing with no removals and a
    stalled watermark."""

    max_dropped_fraction: float = 0.05  # rows dropped by the watermark, of the input rows of the window's batches
    state_memory_fraction: float = 0.8  # state memory of the last batch, of the executor memory
    max_partition_skew: float = 10.0  # max / median keys per state partition
    skew_min_keys: int = 100  # a skew counts only when the largest partition holds at least this many keys
    max_quarantined_fraction: float = 0.05  # rows quarantined, of the rows read (`LakehouseQuarantineHigh`)
    max_state_rows: int = 0  # rows the job's state may hold (`LakehouseStateRowsHigh`); 0: no bound


@dataclass(frozen=True)
class SupervisionSpec:
    """How `lakehouse_live` treats the job: restart or only alert when down, backoff, health limits."""

    on_down: str = "restart"  # "restart" (with backoff) or "alert"
    max_restarts: int = 5  # consecutive restarts before giving up (alerting only)
    backoff_seconds: int = 30  # first restart delay; doubles per consecutive restart
    stall_after_seconds: int = 0  # heartbeat age that means stalled; 0 = 6 live batch intervals, at least 30 s
    health_window_batches: int = 10  # batches looked at for state growth / watermark progress
    health: HealthThresholds = HealthThresholds()


# A driver's JIT compilers (`resources.live_jit`). A live driver compiles with C1 only unless its resources say
# `tiered`: the shipped fleet's batches are small and repeat Spark's planning, Delta's commits and state commits, code
# C2 makes little faster, and C2 compiling it took 40-50 % of each driver's CPU in its first minutes when 4 drivers and
# 16 queries started on 2 cores, which starved their first batches (bench/live_fleet.py: every job running after 115
# and 160 s, 150-350 s with C2; batches no slower). A driver whose batches are large (thousands of rows a second) runs
# them faster with C2 (bench/live_latency.py at 2,000 events/s: silver p95 13 s tiered, 24 s with C1).
# C1 alone gets the JVM's 240 MB code cache of tiered compilation, not its own 48 MB default: a group driver's queries
# filled 48 MB in 3 minutes (bench/soak.py), then the JVM stopped compiling ("CodeCache is full. Compiler has been
# disabled"; a MERGE failed with "Out of space in CodeCache for adapters") and ran its new code interpreted: the
# fleet's load rose to 20-30 on 2 cores within the hour.
JIT_OPTIONS = {"c1": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m", "tiered": ""}
LIVE_JIT_DEFAULT = "c1"


@dataclass(frozen=True)
class ResourcesSpec:
    """What a driver (a job alone, or a group) asks of Spark; None: Spark's default (or the launcher's)."""

    driver_memory: str | None = None  # "2g": the driver's JVM heap (in local mode its executors' too)
    executor_memory: str | None = None  # on a cluster: each executor's heap
    executor_cores: int | None = None  # on a cluster: cores per executor
    cores_max: int | None = None  # on a standalone cluster: cores of the whole application (spark.cores.max)
    live_jit: str | None = None  # a live driver's JIT compilers, a key of JIT_OPTIONS (None: LIVE_JIT_DEFAULT)

    def jit(self, live: bool) -> str:
        """The driver's JIT compilers (a key of JIT_OPTIONS); a backfill's are the JVM's own (tiered C1 + C2)."""
        return (self.live_jit or LIVE_JIT_DEFAULT) if live else "tiered"


@dataclass(frozen=True)
class QualitySpec:
    """Optional `quality:` section of a job with a suite (see include/registry/checks.py)."""

    freshness_lag_seconds: int | None = None  # None: the source watermark + the window slide
    severity: dict[str, str] = field(default_factory=dict)  # check name -> blocking | warning (overrides)


@dataclass(frozen=True)
class JobSpec:
    id: str
    description: str
    source: SourceSpec
    transform: TransformSpec
    sink: SinkSpec
    triggers: dict[str, Trigger]
    state_store: StateStoreSpec
    output_schema: dict[str, str]
    live: bool
    supervision: SupervisionSpec = SupervisionSpec()
    reset_allowed: bool = True  # false: `lakehouse checkpoint` refuses full-refresh and reset-checkpoint
    quality: QualitySpec = QualitySpec()
    group: str | None = None  # live jobs of one group run as one driver, a streaming query each; None: alone
    resources: ResourcesSpec = ResourcesSpec()  # its driver's, when it runs alone (a group's: Registry.groups)

    @property
    def transform_kind(self) -> str:
        return self.transform.kind

    @property
    def right_source(self) -> SourceSpec | None:
        """The second input of a stream_join."""
        return self.transform.right if isinstance(self.transform, StreamJoin) else None

    @property
    def sources(self) -> list[SourceSpec]:
        """Every input of the job: its source, and the right side of a join."""
        return [self.source] + ([self.right_source] if self.right_source else [])

    @property
    def processing_time_timers(self) -> bool:
        """The job runs a stateful processor on processing-time timers (they fire only when batches run)."""
        return isinstance(self.transform, StatefulProcess) and \
            PROCESSORS[self.transform.processor].time_mode == "ProcessingTime"

    @property
    def stateful(self) -> bool:
        """The job keeps state in its checkpoint (an apply_changes job keeps it in its tables)."""
        return not isinstance(self.transform, ParseJson | ApplyChanges)

    def tables_written(self) -> list[str]:
        extra = self.transform.deletes_table(self.sink.table) if isinstance(self.transform, ApplyChanges) else None
        return [self.sink.table] + [t for t in (self.sink.quarantine_table, extra) if t]

    @property
    def renamed_columns(self) -> dict[str, str]:
        """Output columns that carry an input column the producer renamed: new name -> former name."""
        return {new: old for source in self.sources for new, old in source.renamed_from.items()
                if new in self.output_schema}

    @property
    def input_renames(self) -> dict[str, str]:
        """The renamed columns of the job's inputs: former name -> new name."""
        return {old: new for source in self.sources for new, old in source.renamed_from.items()}


@dataclass(frozen=True)
class Registry:
    jobs: dict[str, JobSpec]
    order: tuple[str, ...]  # dependency order: upstream jobs first
    table_schemas: dict[str, dict[str, str]]
    group_resources: dict[str, ResourcesSpec] = field(default_factory=dict)  # every group's driver's
    default_resources: ResourcesSpec = ResourcesSpec()  # `defaults.resources`: a driver of several jobs (a backfill)

    def resources(self, unit: str) -> ResourcesSpec:
        """What the driver of `unit` (a group, or a job alone) asks of Spark."""
        return self.group_resources[unit] if unit in self.group_resources else self.job(unit).resources

    def job(self, job_id: str) -> JobSpec:
        if job_id not in self.jobs:
            known = ", ".join(self.order)
            raise KeyError(f"unknown job {job_id!r}; the registry has: {known}")
        return self.jobs[job_id]

    def upstream(self, job_id: str) -> list[str]:
        """Jobs whose tables `job_id` reads."""
        read = {s.name for s in self.job(job_id).sources if s.kind == "delta"}
        return [j.id for j in self.jobs.values() if read & set(j.tables_written())]

    def live_interval_seconds(self, job_id: str) -> int:
        """How far apart the job's live batches come at most: its processing-time interval, or on its upstream's
        commits, the shortest of its upstream jobs' (0 when none has one)."""
        trigger = self.job(job_id).triggers["live"]
        if not trigger.on_upstream_commit:
            return trigger.interval_seconds
        return min((self.live_interval_seconds(j) for j in self.upstream(job_id)), default=0)

    def upstream_commit_problem(self, job_id: str) -> str | None:
        """Why `job_id` cannot run on its upstream's commits (`on-upstream-commit`), or None when it can."""
        job = self.job(job_id)
        for source in job.sources:
            if source.kind != "delta":  # a table source is one a job of the registry writes (loading checks it)
                return (f"on-upstream-commit waits for commits to the tables the job reads, and it reads "
                        f"{source.kind} source {source.name!r}: give it a processing-time trigger")
        if job.processing_time_timers:
            return ("its processor's processing-time timers fire only when batches run, and on-upstream-commit runs "
                    "batches only when the input has new rows: give it a processing-time trigger")
        return None

    def live_units(self) -> dict[str, list[str]]:
        """What runs live, one driver each: a group's name with its live jobs, or a job alone (its id, itself);
        in dependency order of their first job."""
        units: dict[str, list[str]] = {}
        for job_id in self.order:
            job = self.jobs[job_id]
            if job.live:
                units.setdefault(job.group or job_id, []).append(job_id)
        return units

    def group_members(self, group: str) -> list[str]:
        """The live jobs of `group`, in dependency order; KeyError naming the groups when there is no such group."""
        members = [j for j in self.order if self.jobs[j].group == group and self.jobs[j].live]
        if not members:
            known = sorted({j.group for j in self.jobs.values() if j.group and j.live})
            raise KeyError(f"no live job is in group {group!r}; the registry's groups: {', '.join(known) or 'none'}")
        return members

    def cdc_sources(self) -> dict[str, list[SourceSpec]]:
        """The CDC sources the jobs read, by logical database (one connector each), each table once."""
        found: dict[str, dict[str, SourceSpec]] = {}
        for job_id in self.order:
            for source in self.jobs[job_id].sources:
                if source.cdc is not None:
                    found.setdefault(source.cdc.database, {}).setdefault(source.cdc.table, source)
        return {database: list(tables.values()) for database, tables in found.items()}

    def tables_written(self) -> list[str]:
        """Every table a job writes (sinks and quarantine tables), once, in dependency order."""
        return list(dict.fromkeys(t for job_id in self.order for t in self.jobs[job_id].tables_written()))

    def writers_of(self, table: str) -> list[JobSpec]:
        """The jobs writing `table`, in dependency order (several only for alert processors sharing a table)."""
        return [self.jobs[j] for j in self.order if table in self.jobs[j].tables_written()]

    def writer_of(self, table: str) -> JobSpec | None:
        """The (first) job writing `table`: what the table's schema and event time come from."""
        return next(iter(self.writers_of(table)), None)

    def own_alert_types(self, job: JobSpec, table: str) -> tuple[str, ...] | None:
        """The `alert_type`s of `job`'s rows in `table` when other jobs write it too (alert processors sharing
        a table); None when `job` is its only writer (every row is its own)."""
        if len(self.writers_of(table)) < 2:
            return None
        return PROCESSORS[job.transform.processor].alert_types
