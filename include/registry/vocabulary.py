"""The registry's fixed vocabulary: the values its fields take and the shapes of its names."""

from __future__ import annotations

import re

from include.registry.cdc import ApplyChanges
from include.registry.specs import (
    ParseJson,
    RunningAggregate,
    SessionAggregate,
    StatefulProcess,
    StreamJoin,
    WindowAggregate,
)

QUALITY_KINDS = (ParseJson.kind, WindowAggregate.kind, SessionAggregate.kind, StreamJoin.kind,  # kinds whose sink has a suite
                 RunningAggregate.kind, ApplyChanges.kind, StatefulProcess.kind)  # (stateful_process: alert processors)
UPDATE_KINDS = (WindowAggregate.kind, RunningAggregate.kind, "apply_changes")  # kinds whose sink may be upserted
JOIN_TYPES = ("inner", "left_outer", "right_outer", "full_outer")
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")
SINK_MODES = ("append", "update")
STATE_PROVIDERS = ("rocksdb", "hdfs")
# Delta table properties a sink may set: features that delta-rs (the quality and summary readers) supports too.
AUTO_COMPACT = "delta.autoOptimize.autoCompact"  # the writer compacts after its commits (Delta's auto compaction)
BOOLEAN_PROPERTIES = ("delta.appendOnly", "delta.enableChangeDataFeed", AUTO_COMPACT)
LOG_RETENTION = "delta.logRetentionDuration"  # how long Delta keeps commits (cleaned at its log checkpoints)
FILE_RETENTION = "delta.deletedFileRetentionDuration"  # VACUUM's retention; Delta wants LOG_RETENTION >= it
TABLE_PROPERTIES = (*BOOLEAN_PROPERTIES, LOG_RETENTION, FILE_RETENTION,
                    "delta.checkpointInterval", "delta.dataSkippingNumIndexedCols", "delta.targetFileSize")

IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")  # job ids and the column names a job introduces
TABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]*/[a-z_][a-z0-9_]*$")  # layer/name under LAKEHOUSE_ROOT
CATALOG_TABLE_NAME = re.compile(r"^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)$")  # database.table: the same table by name
TABLE_FIELDS = ("table", "quarantine_table", "initial_state")  # the registry's fields that name a table


def is_positive_int(value: object) -> bool:
    """Whether `value` is an integer of at least 1 (YAML's true/false are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
