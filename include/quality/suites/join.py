"""Suites of ``stream_join`` sinks: the join bound, the unmatched rows' missing side, keys, uniqueness and
freshness of the (filtered) left source."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from include.quality.suites.base import Check, RowOps, TableSpec, after_now, common_fields, with_checks
from include.registry import Deduplicate, JobSpec, Registry, StreamJoin


@dataclass(frozen=True, kw_only=True)
class JoinTable(TableSpec):
    """A stream_join sink: left rows joined with the right rows within a time bound."""

    left_time: str  # output columns
    right_time: str
    left_key: str
    right_key: str | None  # None: no right column identifies the right row
    matched: str | None  # the matched column (None: an inner join without one)
    right_columns: tuple[str, ...]  # every output column taken from the right side
    within_seconds: int
    where: str | None  # the SQL filter on the left source
    before_seconds: int = 0  # the right time may precede the left time by this much
    how: str = "left_outer"
    left_columns: tuple[str, ...] = ()  # every output column taken from the left side

    @property
    def unmatched_check(self) -> tuple[str, str]:
        """The check of the unmatched rows' missing side, and its derived column."""
        if self.how in ("right_outer", "full_outer"):
            return "unmatched_one_sided", "missing side values when unmatched"
        return "unmatched_without_right", "right values when unmatched"

    @property
    def offset_column(self) -> str:
        """The derived column of matched rows: seconds from the left time to the right time."""
        return f"{self.right_time} after {self.left_time} (s)"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return (self.left_key, self.right_key) if self.right_key else (self.left_key,)

    @property
    def freshness_column(self) -> str:
        return self.left_time

    @property
    def row_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.left_time, self.left_key, *([self.matched] if self.matched else []),
                                    *self.right_columns, *self.left_columns]))

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        columns = {after_now(self.left_time): ops.seconds(self.left_time) - now_epoch}
        if self.matched:
            offset = ops.exact_seconds(self.right_time) - ops.exact_seconds(self.left_time)
            # matched rows: right time - left time, -1 (out of bounds) when one is missing; unmatched: null
            columns[self.offset_column] = ops.where(ops.is_value(self.matched, True),
                                                         ops.fill_null(offset, -1), None)
            # unmatched rows: values of the side that must be missing (full outer: 0 when either side is)
            missing = {"right_outer": ops.non_null_count(self.left_columns),
                       "full_outer": ops.non_null_count(self.left_columns) * ops.non_null_count(self.right_columns)}
            columns[self.unmatched_check[1]] = ops.where(ops.is_value(self.matched, False),
                                                         missing.get(self.how, ops.non_null_count(self.right_columns)),
                                                         0)
        return columns

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        check = partial(self._check, overrides=overrides)
        checks = []
        if self.matched:
            checks += [
                check("join_bound", "ExpectColumnValuesToBeBetween",
                      {"column": self.offset_column, "min_value": -self.before_seconds,
                       "max_value": self.within_seconds},
                      f"{self.matched} rows: {self.right_time} - {self.left_time} is between {-self.before_seconds} and "
                      f"{self.within_seconds} s (-1: a time is missing; rows not {self.matched} are not counted)"),
                check(self.unmatched_check[0], "ExpectColumnValuesToBeInSet",
                      {"column": self.unmatched_check[1], "value_set": [0]}, self._unmatched_description()),
            ]
        outer_keys = {"inner": self.left_key, "left_outer": self.left_key, "right_outer": self.right_key}
        not_null = tuple(c for c in (outer_keys.get(self.how), self.matched) if c)
        checks += self._time_and_key_checks(self.left_time, not_null, overrides)
        where = f" where {self.where}" if self.where else ""
        return checks + [self._unique_check(overrides),
                         self._freshness_check(f"latest {self.left_time}", overrides, where)]

    def _unmatched_description(self) -> str:
        left, right = ", ".join(self.left_columns), ", ".join(self.right_columns)
        if self.how == "right_outer":
            return f"rows not {self.matched} have no left-side value ({left} null)"
        if self.how == "full_outer":
            return f"rows not {self.matched} have one side without values ({left} null, or {right} null)"
        return f"rows not {self.matched} have no right-side value ({right} null)"


def join_table(job: JobSpec, registry: Registry) -> JoinTable:
    """The spec and checks of a stream_join job's sink table (default lag: watermark + within).

    A side's key is the output column of its table's deduplication key (falling back to the join keys)."""
    join: StreamJoin = job.transform
    right = join.right
    output = {side: join.output_of(side) for side in ("left", "right")}

    def key(side: str, table: str, fallback: list[str]) -> str | None:
        writer = registry.writer_of(table)
        unique = list(writer.transform.keys) if writer and isinstance(writer.transform, Deduplicate) else []
        return next((output[side][c] for c in [*unique, *fallback] if c in output[side]), None)

    left_key = key("left", job.source.name, [a for a, _ in join.join_keys])
    assert left_key is not None, f"stream_join job {job.id}: no output column identifies the left row"
    return with_checks(JoinTable(
        **common_fields(job, job.source.watermark_seconds + join.within_seconds),
        left_time=output["left"][job.source.event_time], right_time=output["right"][right.event_time],
        left_key=left_key, right_key=key("right", right.name, [b for _, b in join.join_keys]),
        matched=join.matched_column, right_columns=tuple(output["right"].values()),
        within_seconds=join.within_seconds, where=join.where, before_seconds=join.before_seconds,
        how=join.how, left_columns=tuple(output["left"].values())), job.quality.severity)
