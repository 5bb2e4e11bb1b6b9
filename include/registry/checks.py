"""The data-quality checks by stable name, with default severity, scope and meaning.

This is the one place severities are declared. A job's optional ``quality.severity`` mapping in the
registry (``include/jobs.yaml``) overrides them per table; the registry validates names and values
against this module, which therefore imports nothing.

Scopes:

- ``rows``: a property of each row; incremental runs check only the rows added since the last
  validated Delta version (append-mode tables).
- ``table``: a property of the whole table (and its source); always computed on the latest version.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCKING, WARNING = "blocking", "warning"
SEVERITIES = (BLOCKING, WARNING)


@dataclass(frozen=True)
class CheckInfo:
    severity: str  # default severity
    scope: str  # "rows" or "table"
    meaning: str


CHECKS: dict[str, CheckInfo] = {
    # windows (window_aggregate)
    "window_size": CheckInfo(BLOCKING, "rows", "window_end - window_start equals the window size"),
    "window_aligned": CheckInfo(BLOCKING, "rows", "window_start lies on the epoch-aligned slide grid"),
    # sessions (session_aggregate)
    "session_bounds": CheckInfo(BLOCKING, "rows", "session_end - session_start is at least the gap "
                                                  "(so the end is not before the start)"),
    # joins (stream_join)
    "join_bound": CheckInfo(BLOCKING, "rows", "matched rows have a right event time within "
                                              "[left event time, left event time + within]"),
    "unmatched_without_right": CheckInfo(BLOCKING, "rows", "unmatched rows have every right-side column null"),
    "unmatched_one_sided": CheckInfo(BLOCKING, "rows", "right or full outer joins: unmatched rows have every "
                                                       "column of one side null (right outer: the left side)"),
    "unique_rows": CheckInfo(BLOCKING, "table", "one row per (left key, right key); alerts: per (alert_type, "
                                                "entity, alert_time); session summaries: per (keys, "
                                                "session_start); SCD type 1: per key; SCD type 2: per (key, "
                                                "_cdc_sequence)"),
    # running totals (running_aggregate)
    "totals_never_decrease": CheckInfo(BLOCKING, "table", "no key's row count went down or vanished since the "
                                                          "version validated before"),
    # alerts (stateful_process with an alert processor)
    "alert_in_window": CheckInfo(BLOCKING, "rows", "event-time rules: alert_time - window_start is between 0 and "
                                                   "the rule's window"),
    "alert_types_known": CheckInfo(BLOCKING, "rows", "alert_type is one the table's writers emit"),
    "one_alert_per_burst": CheckInfo(BLOCKING, "table", "event-time rules: an entity's alerts do not overlap: each "
                                                        "starts after the previous one of its type was raised"),
    # session summaries (stateful_process with the sessionizer)
    "summary_span": CheckInfo(BLOCKING, "rows", "session_end (the last event) is not before session_start"),
    "closed_after_gap": CheckInfo(BLOCKING, "rows", "closed_at is session_end + the gap"),
    "sessions_apart": CheckInfo(BLOCKING, "table", "a key's sessions do not overlap: each starts more than the "
                                                   "gap after the end of the previous one"),
    # SCD type 2 (apply_changes, scd: 2): a key's versions, __start_at to __end_at (null: current)
    "version_span": CheckInfo(BLOCKING, "rows", "a closed version's __start_at is before its __end_at"),
    "one_current_version": CheckInfo(BLOCKING, "table", "a key has at most one current version (__end_at null)"),
    "versions_apart": CheckInfo(BLOCKING, "table", "a key's versions do not overlap: in __start_at order, none "
                                                   "starts before the previous one's __end_at, nor after a current "
                                                   "one (two current versions are one_current_version's)"),
    # bronze (parse_json)
    "no_rescued_fields": CheckInfo(WARNING, "rows", "no row carries a field its source's schema does not name (kept "
                                                    "in `_rescued`); the result names the fields and the rows per "
                                                    "field"),
    # every kind (keys: the grouping keys; joins: the left key and the matched column)
    "no_future_windows": CheckInfo(BLOCKING, "rows", "no window or session starts (no joined left event time "
                                                     "lies) after the validation time"),
    "keys_not_null": CheckInfo(BLOCKING, "rows", "the key columns are never null"),
    "event_count_positive": CheckInfo(BLOCKING, "rows", "count aggregations are >= 1"),
    "values_in_range": CheckInfo(WARNING, "rows", "sum aggregations are within [0, 1e12]"),
    "unique_windows": CheckInfo(BLOCKING, "table", "one row per (start, end, keys) of a window or session"),
    "freshness": CheckInfo(BLOCKING, "table", "the table is up to date until at most the freshness lag before the "
                                              "latest source event: windows, its latest finalized window_end; "
                                              "joins, its latest left event time; sessions, the end of the "
                                              "earliest source session closed after its latest session_end "
                                              "that it lacks (none: up to date); alerts and session "
                                              "summaries, the job's watermark; SCD tables, the latest change "
                                              "(_cdc_commit_time) they hold or their job has read"),
    "reconciliation": CheckInfo(BLOCKING, "table", "per finalized window or session, the count equals the "
                                                   "distinct source events in it, less at most those that "
                                                   "reached the source after the job's watermark could have "
                                                   "passed them"),
}
