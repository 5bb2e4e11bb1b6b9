"""Suites of ``parse_json`` sinks (bronze): the rows that carried fields the source's schema does not name.

Bronze keeps such fields in ``_rescued`` (one JSON object per row, null when there are none), so a producer's new
field is never lost; this suite is how a team learns of it. Its one row check, ``no_rescued_fields`` (a warning by
default), runs on the rows the runs since the last validation added: how many carried rescued fields, and which
field names, with the rows per name (:meth:`RescuedTable.row_details`, in the result's observed value). The field names are a derived column
(``rescued fields``: the names of a row's ``_rescued``, sorted, comma-separated), so the Data Docs sample shows them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

from include.quality.suites.base import Check, RowOps, TableSpec, common_fields, with_checks
from include.registry import RESCUED_COLUMN, JobSpec, Registry

FIELD_NAMES = "rescued fields"  # the derived column: a row's rescued field names
NAME_SEPARATOR = ", "


@dataclass(frozen=True, kw_only=True)
class RescuedTable(TableSpec):
    """A parse_json sink: bronze rows with their ``_rescued`` fields."""

    source_name: str  # the registry source the table ingests

    noun: ClassVar[str] = "row"

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (RESCUED_COLUMN,)

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {FIELD_NAMES: ops.field_names(RESCUED_COLUMN, NAME_SEPARATOR)}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        return [self._check("no_rescued_fields", "ExpectColumnValuesToBeNull", {"column": FIELD_NAMES},
                            f"no row carries a field the schema of source {self.source_name!r} does not name "
                            f"(kept in {RESCUED_COLUMN}; add it to the registry's schema to make it a column)",
                            overrides)]

    @property
    def details_column(self) -> str | None:
        return FIELD_NAMES

    def row_details(self, value_counts: dict[Any, int]) -> dict[str, dict[str, Any]]:
        """The details of ``no_rescued_fields``: the rows that carried rescued fields, and the rows per field name
        (most first), from the validated rows' counts per value of the derived column (nulls not counted)."""
        per_field: Counter = Counter()
        for names, rows in value_counts.items():
            for name in names.split(NAME_SEPARATOR):
                per_field[name] += rows
        return {"no_rescued_fields": {"rows_with_rescued_fields": sum(value_counts.values()),
                                      "fields": dict(sorted(per_field.items(), key=lambda kv: (-kv[1], kv[0])))}}

def rescued_table(job: JobSpec, registry: Registry) -> RescuedTable:
    fields = common_fields(job, 0)
    return with_checks(RescuedTable(**fields, source_name=job.source.name), job.quality.severity)
