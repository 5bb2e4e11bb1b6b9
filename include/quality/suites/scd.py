"""Suites of ``apply_changes`` sinks, the SCD tables: type 1 (:class:`CurrentTable`: one row per key) and type 2
(:class:`HistoryTable`: a key's versions from ``__start_at`` to ``__end_at``, null while current).

Both are fresh as the latest change they hold or their job has read, against the latest ``_cdc_commit_time`` of the
bronze table they apply (:mod:`include.quality.scd_metrics`); a type 2 table's versions are checked one by one
(``version_span``) and per key (``one_current_version``, ``versions_apart``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from include.quality.suites.aggregate import RUNNING_DEFAULT_LAG_SECONDS
from include.quality.suites.base import Check, RowOps, TableSpec, common_fields, with_checks
from include.registry import JobSpec, Registry
from include.registry.cdc import END_AT, SEQUENCE, START_AT, ApplyChanges

COMMIT_TIME = "_cdc_commit_time"  # when the change's transaction committed: the bronze rows' and a type 1 row's
SPAN = f"{END_AT} after {START_AT} (s)"  # the derived column of version_span (null while current)


@dataclass(frozen=True, kw_only=True)
class ScdTable(TableSpec):
    """An apply_changes sink: the changes of `source_table` (bronze) applied by `keys`."""

    keys: tuple[str, ...]
    deletes_table: str | None = None  # type 1: where its job keeps the keys it deleted (their latest change)

    @property
    def unique_key(self) -> tuple[str, ...]:
        """A row per key (type 1); a type 2 table's versions are told apart by their first change."""
        return self.keys

    @property
    def row_columns(self) -> tuple[str, ...]:
        return self.keys

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {}

    @property
    def held_times(self) -> tuple[str, ...]:
        """The table's columns of change commit times: the latest of them is the latest change it holds."""
        return (self.freshness_column,)

    def _scd_checks(self, overrides: dict[str, str]) -> list[Check]:
        """Uniqueness and freshness (the latest change held or read)."""
        return [self._unique_check(overrides),
                self._freshness_check(f"the latest change held ({', '.join(self.held_times)}) or read by "
                                      f"{self.job_id}", overrides)]


@dataclass(frozen=True, kw_only=True)
class CurrentTable(ScdTable):
    """SCD type 1: the rows as the database holds them now, one per key, each with its latest change's
    `_cdc_sequence` and `_cdc_commit_time` (a deleted key's: in the deletes table)."""

    noun: ClassVar[str] = "key"

    @property
    def freshness_column(self) -> str:
        return COMMIT_TIME

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        return self._not_null_checks(self.keys, overrides) + self._scd_checks(overrides)


@dataclass(frozen=True, kw_only=True)
class HistoryTable(ScdTable):
    """SCD type 2: a row per version of a key, valid from `__start_at` to `__end_at` (null: current), the next
    version starting when the previous ends; identified by its first change (`_cdc_sequence`)."""

    noun: ClassVar[str] = "version"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return (*self.keys, SEQUENCE)

    @property
    def freshness_column(self) -> str:
        return START_AT

    @property
    def held_times(self) -> tuple[str, ...]:
        return (START_AT, END_AT)

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (*self.keys, START_AT, END_AT)

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {SPAN: ops.exact_seconds(END_AT) - ops.exact_seconds(START_AT)}  # null end: null

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        checks = [self._check("version_span", "ExpectColumnValuesToBeBetween",
                              {"column": SPAN, "min_value": 0, "strict_min": True},
                              f"a closed version's {START_AT} is before its {END_AT} (current versions: not "
                              "counted)", overrides),
                  *self._not_null_checks((*self.keys, START_AT), overrides)]
        checks += self._scd_checks(overrides)
        checks += [
            self._check("one_current_version", "ExpectColumnMaxToBeBetween",
                        {"column": "keys_with_several_current_versions", "max_value": 0},
                        f"at most one current version ({END_AT} null) per ({', '.join(self.keys)})", overrides),
            self._check("versions_apart", "ExpectColumnMaxToBeBetween",
                        {"column": "overlapping_versions", "max_value": 0},
                        f"in {START_AT} order, no version of a key starts before the previous one's {END_AT} or "
                        "after a current one", overrides)]
        return checks


def scd_table(job: JobSpec, registry: Registry | None = None) -> ScdTable:
    """The spec and checks of an apply_changes job's sink table (default lag: 5 minutes, a live job trailing its
    source), fresh against its source's `_cdc_commit_time`."""
    spec: ApplyChanges = job.transform
    fields = {**common_fields(job, RUNNING_DEFAULT_LAG_SECONDS), "event_time": COMMIT_TIME, "keys": spec.keys}
    if spec.scd == 1:
        return with_checks(CurrentTable(**fields, deletes_table=spec.deletes_table(job.sink.table)),
                           job.quality.severity)
    return with_checks(HistoryTable(**fields), job.quality.severity)
