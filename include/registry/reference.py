"""What each key of `jobs.yaml` means, where the code that reads it does not say so itself: the registry's sections
(which parser of this package reads each one, which spec dataclass holds it), the meaning of each key (`KEY_TEXT`) and
where the values it takes are listed (`VALUES`). The documentation's `jobs.yaml` reference (docs/hooks.py) joins these
to the keys the parsers accept and to the spec classes' field comments; a key without a meaning, or a meaning for a
key no parser reads, fails its strict build. Nothing here is read when a registry is loaded."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Section:
    path: str  # as written in jobs.yaml
    readers: tuple[str, ...]  # "module:function" or "module:function@where" (the `where` of one unknown_fields call)
    spec: str | None = None  # the spec dataclass whose field comments say what the keys mean
    about: str = ""  # the section itself


SECTIONS: tuple[Section, ...] = (
    Section("(top level)", ("loading:build_registry@raw",), about="A registry file is one mapping."),
    Section("defaults", ("loading:build_registry@'defaults'",),
            about="What every job gets unless it says otherwise; each job's own section of the same name refines "
                  "it (its fields win)."),
    Section("defaults.backfill", ("sources:_admission",), "Admission",
            about="The admission of available-now runs (backfills, catch-ups) of every source that has no "
                  "`backfill` of its own."),
    Section("groups.<group>", ("loading:_parse_groups",), about="A live group's driver."),
    Section("sources.<source>", ("sources:parse_sources",), "SourceSpec",
            about="A landing source (files under `path`), a Kafka source (`kafka`) or a database table's changes "
                  "(`cdc`), which `parse_json` jobs read."),
    Section("sources.<source>.kafka", ("sources:_kafka_topics",), "KafkaTopics"),
    Section("sources.<source>.cdc", ("sources:_cdc_table",), "CdcTable",
            about="A table of the CDC database (LAKEHOUSE_CDC_DATABASE_URL, or the local one) whose changes "
                  "Debezium captures (`lakehouse cdc up`) into its topic, `<database>.<schema>.<table>`."),
    Section("sources.<source>.schema.<column>", ("sources:_schema",),
            about="A column given as a mapping instead of a type: a field the producer renamed."),
    Section("jobs.<job>", ("loading:_parse_job",), "JobSpec", about="One streaming job."),
    Section("jobs.<job>.source", ("sources:parse_source",), "SourceSpec",
            about="What the job reads: exactly one of `landing`, `kafka` or `table`, with its admission. A "
                  "`stream_join`'s `transform.right` takes the same keys."),
    Section("jobs.<job>.source.backfill", ("sources:_admission",), "Admission",
            about="The source's admission under available-now (else `defaults.backfill`, else the live limits)."),
    Section("jobs.<job>.transform (every kind)", ("transforms:parse_transform",),
            about="What the job computes; the keys below depend on its `kind`."),
    Section("jobs.<job>.transform (parse_json)", ("transforms:_parse_json",), "ParseJson"),
    Section("jobs.<job>.transform (deduplicate)", ("transforms:_parse_deduplicate",), "Deduplicate"),
    Section("jobs.<job>.transform (window_aggregate)", ("transforms:_parse_window_aggregate",), "WindowAggregate"),
    Section("jobs.<job>.transform (session_aggregate)", ("transforms:_parse_session_aggregate",), "SessionAggregate"),
    Section("jobs.<job>.transform (running_aggregate)", ("transforms:_parse_running_aggregate",), "RunningAggregate"),
    Section("jobs.<job>.transform (stream_join)", ("transforms:_parse_stream_join",), "StreamJoin"),
    Section("jobs.<job>.transform (stateful_process)", ("transforms:_parse_stateful_process",), "StatefulProcess"),
    Section("jobs.<job>.transform (apply_changes)", ("transforms:_parse_apply_changes",), "ApplyChanges",
            about="A CDC source's bronze table applied to the sink as SCD type 1 (the rows as they are now) or type 2 "
                  "(their history); the sink's mode is `update`."),
    Section("jobs.<job>.transform.keys[] (an expression key)", ("transforms:_expression_key",),
            about="A key of `window_aggregate`, `session_aggregate` or `running_aggregate` given as a SQL expression "
                  "over the source's columns instead of a column."),
    Section("jobs.<job>.transform.aggregations.<column>", ("transforms:_aggregations",), "Aggregation",
            about="One output column of an aggregation."),
    Section("jobs.<job>.transform.within (a stream_join's two-sided bound)", ("transforms:_join_bounds",),
            about="`within` is a duration (the right event time lies in [left time, left time + within]) or this "
                  "mapping (in [left time − before, left time + after])."),
    Section("jobs.<job>.sink", ("sinks:parse_sink",), "SinkSpec", about="The table the job writes and how."),
    Section("jobs.<job>.sink.maintenance", ("sinks:_maintenance",), "MaintenanceSpec"),
    Section("jobs.<job>.triggers", ("operations:parse_triggers",),
            about="Per job, or under `defaults`. A trigger is `available-now`, `processing-time=<duration>` (1 second "
                  "to 24 hours) or `on-upstream-commit` (a job reading tables only)."),
    Section("jobs.<job>.state_store", ("operations:parse_state_store",), "StateStoreSpec",
            about="Per job, or under `defaults`."),
    Section("jobs.<job>.supervision", ("operations:parse_supervision",), "SupervisionSpec",
            about="Per job, or under `defaults`."),
    Section("jobs.<job>.supervision.health", ("operations:_health",), "HealthThresholds",
            about="Per job, or under `defaults.supervision.health`; a job's thresholds refine the defaults' one by "
                  "one."),
    Section("jobs.<job>.quality", ("operations:parse_quality",), "QualitySpec"),
    Section("jobs.<job>.resources", ("operations:parse_resources",), "ResourcesSpec",
            about="Under `defaults`, a job that runs alone, or `groups.<group>`; both refine `defaults.resources`."),
)

# What the code does not say about a key (a field comment of its spec class, or the docstring of the dataclass it
# holds), by section path and key.
KEY_TEXT: dict[str, dict[str, str]] = {
    "(top level)": {
        "defaults": "settings every job gets unless it says otherwise",
        "sources": "the landing and Kafka sources, by name",
        "jobs": "the jobs, by id (lowercase letters, digits and underscores)",
        "groups": "the live groups' drivers, by group name: their `resources`",
    },
    "defaults": {
        "triggers": "every job's triggers (`backfill`, `live`)",
        "state_store": "every job's state store settings",
        "supervision": "every job's supervision policy",
        "backfill": "the admission of available-now runs of every source without its own",
        "group": "the group of every job that names none",
        "resources": "what every driver asks of Spark (a backfill's driver of several jobs takes these)",
    },
    "groups.<group>": {"resources": "what the group's driver asks of Spark"},
    "sources.<source>": {
        "path": "a landing source's directory (default `landing/<source>`)",
        "kafka": "a Kafka source: its topics (`topic` or `topics`) and where its broker is",
        "cdc": "a database table's changes, captured by Debezium: its `database`, `table` and `keys`",
        "format": "the format of a line (a message's value): `json`, the only one supported",
        "schema": "the columns of a line, `column: type` (or `column: {type: T, renamed_from: former_name}` for a field "
                  "the producer renamed: the tables rename it in place, and lines that still carry the former name are "
                  "read into it); a field it does not name goes to `_rescued`; a field removed is dropped in place; a "
                  "`json` column keeps a field's value whole as its JSON text (an object or array too, which a "
                  "`string` column sends to the quarantine as `wrong_type`)",
        "required": "columns without which a line goes to the quarantine (`missing_<column>`)",
        "event_time": "the timestamp column that is the source's event time",
    },
    "sources.<source>.schema.<column>": {
        "type": "the column's type",
        "renamed_from": "the name the producer sent the field under before: the tables rename the column in place "
                        "(`evolve`), and lines that still carry that name are read into it",
    },
    "sources.<source>.cdc": {
        "connection": "the Airflow connection (conn type `kafka`) whose extra's `bootstrap.servers` names the broker "
                      "the changes are on",
    },
    "sources.<source>.kafka": {
        "connection": "the Airflow connection (conn type `kafka`) whose extra's `bootstrap.servers` names the broker",
        "topic": "the topic to read (or `topics`: a list)",
        "topics": "the topics to read (or `topic`: one)",
    },
    "jobs.<job>": {
        "description": "what the job does, in a sentence (the Airflow task's docs)",
        "source": "what the job reads",
        "transform": "what it computes: a `kind` and its fields",
        "sink": "the table it writes",
        "triggers": "its `backfill` and `live` triggers",
        "state_store": "its state store",
        "live": "whether `lakehouse_live` runs the job live",
        "resources": "what the job's driver asks of Spark",
    },
    "jobs.<job>.source": {
        "landing": "a landing source of `sources:`, by name",
        "kafka": "a Kafka source of `sources:`, by name",
        "cdc": "a CDC source of `sources:`, by name (its table's change events)",
        "table": "a table another job of the registry writes (`layer/name`, or `layer.name`)",
        "max_files_per_trigger": "live admission: files (landing) or upstream commits (a table) per micro-batch",
        "max_bytes_per_trigger": "live admission: bytes per micro-batch (`64 MB`); a landing source takes files or "
                                 "bytes, not both",
        "watermark": "how late an event may come: the event-time watermark delay (`10 minutes`)",
        "event_time": "the event-time column, when not the one the table inherits from its writer",
    },
    "jobs.<job>.source.backfill": {
        "max_files_per_trigger": "files (or upstream commits) per available-now micro-batch",
        "max_bytes_per_trigger": "bytes per available-now micro-batch (`512 MB`)",
    },
    "defaults.backfill": {
        "max_files_per_trigger": "files (or upstream commits) per available-now micro-batch",
        "max_bytes_per_trigger": "bytes per available-now micro-batch (`512 MB`)",
    },
    "jobs.<job>.transform (every kind)": {"kind": "the transform kind"},
    "jobs.<job>.transform (apply_changes)": {
        "kind": "`apply_changes`",
        "keys": "the columns a change is applied by (the database table's primary key)",
        "track_history": "scd 2: the columns whose change starts a new version, a list or `{except: [columns]}` "
                         "(default every data column); a change to the others updates the current version in place",
        "ignore_null_updates": "true: a null in a change keeps the value the row had (Debezium sends whole rows: "
                               "false, the default, applies them)",
    },
    "jobs.<job>.transform (deduplicate)": {"keys": "the columns that identify a re-sent row"},
    "jobs.<job>.transform (window_aggregate)": {
        "window": "the window's length (a duration)",
        "slide": "how far windows slide (a duration dividing the window; default: the window, tumbling)",
        "keys": "the grouping keys: columns, or expression keys",
        "aggregations": "the output columns, `name: {fn, column}`",
    },
    "jobs.<job>.transform (session_aggregate)": {
        "gap": "the inactivity that closes a session (a duration)",
        "keys": "the grouping keys: columns, or expression keys",
        "aggregations": "the output columns, `name: {fn, column}`",
    },
    "jobs.<job>.transform (running_aggregate)": {
        "keys": "the grouping keys (one row per key; the sink's merge keys)",
        "aggregations": "the output columns, `name: {fn, column}`",
    },
    "jobs.<job>.transform (stream_join)": {
        "kind": "`stream_join`",
        "right": "the second input, a `source:`-like mapping (a table, its watermark and event time)",
        "within": "the bound in event time: a duration, or `{before, after}`",
        "columns": "the output columns, `name: left.<column>` or `right.<column>`; both event times must be kept",
    },
    "jobs.<job>.transform (stateful_process)": {
        "kind": "`stateful_process`",
        "keys": "the columns the processor's state is kept per",
    },
    "jobs.<job>.transform.keys[] (an expression key)": {
        "name": "the output column",
        "expr": "a SQL expression over the source's columns (`to_date(event_time)`)",
        "type": "the column type the value is cast to (default `string`)",
    },
    "jobs.<job>.transform.aggregations.<column>": {
        "type": "the type of an `expr` (default `double`). The output column's type is Spark's: `count` a `long`; "
                "`sum` of an `int` or `long` a `long`, of a `float` or `double` a `double`, of a `decimal(p,s)` a "
                "`decimal(p+10,s)`; `avg` a `double`, of a `decimal(p,s)` a `decimal(p+4,s+4)` (both at most 38); "
                "`min` and `max` the input's type",
    },
    "jobs.<job>.transform.within (a stream_join's two-sided bound)": {
        "before": "how long before the left event time a right event may lie (a duration)",
        "after": "how long after the left event time a right event may lie (a duration)",
    },
    "jobs.<job>.sink": {
        "table": "the table written (`layer/name`, or its catalog name `layer.name`)",
        "mode": "`append` (rows once final) or `update` (a MERGE upsert on `merge_keys`)",
        "merge_keys": "the columns an `update` sink upserts on",
        "partition_by": "the table's partition columns",
        "quarantine_table": "where a `parse_json` job writes the lines it cannot parse",
    },
    "jobs.<job>.triggers": {
        "backfill": "the trigger of available-now runs (backfills, catch-ups): `available-now`",
        "live": "the trigger of live runs: `processing-time=<duration>` or `on-upstream-commit`",
    },
    "jobs.<job>.state_store": {
        "provider": "`rocksdb` (state on disk, in RocksDB) or `hdfs` (Spark's in-memory store; never for a "
                    "`stateful_process` job); Spark fixes it in a checkpoint",
        "changelog_checkpointing": "how a batch commits its state: `true` a changelog per batch (and a snapshot every "
                                   "few), `false` a snapshot every batch, `live` changelogs in live runs and "
                                   "snapshots in available-now runs and checkpoint actions",
        "shuffle_partitions": "the state's partitions (1 to 2000); a change is a `repartition` of the checkpoint",
        "min_batches_to_retain": "batches of state and offsets a checkpoint keeps (how far `rollback` can go back)",
    },
    "jobs.<job>.sink.maintenance": {
        "optimize": "whether `lakehouse maintain` compacts the table (OPTIMIZE); an update-mode sink also compacts "
                    "itself as it commits (Delta's auto compaction)",
        "vacuum_retention": "how long VACUUM keeps replaced files, in whole hours (`7 days`); also the table's "
                            "`delta.deletedFileRetentionDuration` and `delta.logRetentionDuration` unless "
                            "`properties` name them",
    },
    "jobs.<job>.resources": {
        "live_jit": "a live driver's JIT compilers: `c1` (C1 only, the default) or `tiered` (C1 and C2, as backfills "
                    "always run)",
    },
    "jobs.<job>.quality": {"freshness_lag": "how far behind its latest source event the table may be (a duration)"},
}

# The values a key takes, from the registry's vocabulary and catalogues (module:expression, by section and key).
VALUES: dict[tuple[str, str], str] = {
    ("jobs.<job>.transform (every kind)", "kind"): "transforms:TRANSFORM_KINDS",
    ("jobs.<job>.transform (stateful_process)", "processor"): "processors:PROCESSORS",
    ("jobs.<job>.transform (stream_join)", "how"): "vocabulary:JOIN_TYPES",
    ("jobs.<job>.transform.aggregations.<column>", "fn"): "vocabulary:AGGREGATE_FUNCTIONS",
    ("jobs.<job>.transform.aggregations.<column>", "type"): "columns:TYPE_NAMES",
    ("jobs.<job>.transform.keys[] (an expression key)", "type"): "columns:TYPE_NAMES",
    ("sources.<source>", "schema"): "columns:TYPE_NAMES",
    ("sources.<source>.schema.<column>", "type"): "columns:TYPE_NAMES",
    ("jobs.<job>.sink", "mode"): "vocabulary:SINK_MODES",
    ("jobs.<job>.sink", "properties"): "vocabulary:TABLE_PROPERTIES",
    ("jobs.<job>.state_store", "provider"): "vocabulary:STATE_PROVIDERS",
    ("jobs.<job>.state_store", "changelog_checkpointing"): "specs:(True, False, LIVE_ONLY)",
    ("jobs.<job>.resources", "live_jit"): "specs:JIT_OPTIONS",
    ("jobs.<job>.quality", "severity"): "checks:SEVERITIES",
}
