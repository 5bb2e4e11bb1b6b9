"""The job registry: `jobs.yaml` loaded, validated and resolved into typed, frozen specs.

- :mod:`.specs`: the spec types (one per transform kind), `JobSpec`, `Registry`.
- :mod:`.durations`: durations and triggers.
- :mod:`.columns`: the column types (declared once) and the fixed bronze/quarantine columns.
- :mod:`.checks`: the data-quality checks' catalogue (names, default severities), which `quality:`
  sections are validated against.
- :mod:`.loading`: loading and validation; every error names the job (or source) and the field. A job's
  sections are parsed by :mod:`.sources` (its inputs), :mod:`.transforms` (one parser per transform kind),
  :mod:`.sinks` and :mod:`.operations` (triggers, state store, supervision, quality), sharing one
  :mod:`.context` and the fixed :mod:`.vocabulary`.
- :mod:`.graph`: which tables each job reads and writes, and the dependency order.
- :mod:`.reference`: what each `jobs.yaml` key means where its parser does not say (the documentation's reference).

Light on purpose: the DAG files import it at parse time.
"""

from include.registry.columns import (
    BRONZE_EXTRA_COLUMNS,
    CHANGE_FEED_COLUMNS,
    COLUMN_TYPES,
    KNOWN_TYPES,
    QUARANTINE_SCHEMA,
    RESCUED_COLUMN,
    ColumnType,
    column_type,
    delta_widens,
    type_name,
)
from include.registry.durations import Trigger, parse_duration, parse_size
from include.registry.loading import RegistryError, build_registry, load_registry
from include.registry.processors import PROCESSORS, ProcessorInfo
from include.registry.specs import (
    MAX_SHUFFLE_PARTITIONS,
    Admission,
    Aggregation,
    CdcTable,
    Deduplicate,
    JobSpec,
    JoinColumn,
    MaintenanceSpec,
    ParseJson,
    QualitySpec,
    Registry,
    ResourcesSpec,
    RunningAggregate,
    SessionAggregate,
    SinkSpec,
    SourceSpec,
    StatefulProcess,
    StateStoreSpec,
    StreamJoin,
    SupervisionSpec,
    TransformSpec,
    WindowAggregate,
)

__all__ = [
    "BRONZE_EXTRA_COLUMNS", "CHANGE_FEED_COLUMNS", "COLUMN_TYPES", "KNOWN_TYPES", "MAX_SHUFFLE_PARTITIONS", "PROCESSORS", "QUARANTINE_SCHEMA", "RESCUED_COLUMN", "ProcessorInfo", "Admission", "CdcTable", "Aggregation", "ColumnType", "column_type", "delta_widens", "type_name", "Deduplicate",
    "JobSpec", "JoinColumn", "MaintenanceSpec", "ParseJson", "QualitySpec", "Registry", "RegistryError", "ResourcesSpec", "RunningAggregate", "SessionAggregate",
    "SinkSpec", "SourceSpec", "StatefulProcess", "StateStoreSpec", "StreamJoin", "SupervisionSpec", "TransformSpec", "Trigger",
    "WindowAggregate", "build_registry", "load_registry", "parse_duration", "parse_size",
]
