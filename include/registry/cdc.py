"""Change data capture in the registry: a database's changes applied to a table, as SCD type 1 or type 2.

A `cdc:` source (include/registry/sources.py) reads a table's Debezium topic; its bronze job (`parse_json`) keeps
every change raw, with the row as the change left it (a delete: as it was) and these columns
(:data:`include.registry.columns.CDC_COLUMNS`):

- `_cdc_op`: `c` insert, `u` update, `d` delete, `r` read by a snapshot, `t` the tombstone Debezium sends after a
  delete (its key only);
- `_cdc_sequence`: the change's place among its key's changes in the database's commit order, as sortable text (a
  snapshot's rows first, then by WAL position; equal for the same change delivered twice); an `apply_changes` job
  orders by it unless it names another column;
- `_cdc_lsn`, `_cdc_tx_id`: the change's WAL position and transaction; `_cdc_commit_time`: when its transaction
  committed (a snapshot's row: when it was read).

An `apply_changes` job reads that bronze table and keeps a table of the rows as they are now (`scd: 1`: one row per
key, a delete removes it) or of their history (`scd: 2`: a row per version of a key, `__start_at` to `__end_at`, null
while current). Its columns besides the source's are :data:`TYPE1_COLUMNS` / :data:`TYPE2_COLUMNS`; a type 1 job also
keeps the keys it deleted (:data:`DELETES_COLUMNS`) in `<table>_deletes`, so that an older change arriving after a
delete never brings the row back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

SEQUENCE = "_cdc_sequence"
START_AT, END_AT = "__start_at", "__end_at"  # contracts: a type 2 version's validity, [start, end)
DEFAULT_DELETE_WHEN = "_cdc_op = 'd'"
# The bronze columns an apply_changes job reads besides the keys and the data (those not here are the data's).
CHANGE_INPUTS = ("_cdc_op", SEQUENCE, "_cdc_lsn", "_cdc_tx_id", "_cdc_commit_time")
TYPE1_COLUMNS = {SEQUENCE: "string", "_cdc_commit_time": "timestamp"}  # of the change that wrote the row
TYPE2_COLUMNS = {
    START_AT: "timestamp",  # when the version's first change committed
    END_AT: "timestamp",  # when the change that ended it committed (a new version, or a delete); null: current
    SEQUENCE: "string",  # the version's first change
    "_cdc_tx_id": "long",
    "_cdc_last_sequence": "string",  # the last change it holds (a change to untracked columns updates it in place)
    "_cdc_end_sequence": "string",  # the change that ended it
    "_cdc_end_tx_id": "long",
}
DELETES_COLUMNS = {SEQUENCE: "string", "_cdc_commit_time": "timestamp"}  # besides the keys: the delete
DELETES_SUFFIX = "_deletes"


@dataclass(frozen=True)
class CdcTable:
    """A database table whose changes Debezium captures into a Kafka topic: a `cdc:` source (include/cdc)."""

    database: str  # the logical database: its connector, replication slot, publication and topics' prefix
    table: str  # `schema.table` in the database (lower case)
    keys: tuple[str, ...]  # its primary key: the columns a change is applied by

    @property
    def topic(self) -> str:
        """Debezium's topic of the table: `<database>.<schema>.<table>`."""
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class ApplyChanges:
    """Apply a CDC bronze table's changes to the sink: by `keys`, in `sequence_by` order, as SCD type 1 or 2."""

    keys: tuple[str, ...]
    scd: int  # 1: the rows as they are now; 2: their history
    columns: tuple[str, ...]  # the data columns copied from the changes (keys first)
    tracked: tuple[str, ...]  # scd 2: the columns whose change starts a new version (others are updated in place)
    sequence_by: str = SEQUENCE  # the input column that orders the changes of a key
    delete_when: str = DEFAULT_DELETE_WHEN  # a SQL condition over the input: this change deletes its key
    ignore_null_updates: bool = False  # true: a null in an update keeps the value the row had
    kind: ClassVar[str] = "apply_changes"

    def deletes_schema(self, output_schema: dict[str, str]) -> dict[str, str]:
        """The columns of the type 1 job's table of deleted keys."""
        return {**{k: output_schema[k] for k in self.keys}, **DELETES_COLUMNS}

    def deletes_table(self, sink_table: str) -> str | None:
        """Where a type 1 job keeps the keys it deleted (None for type 2: its history holds them)."""
        return f"{sink_table}{DELETES_SUFFIX}" if self.scd == 1 else None
