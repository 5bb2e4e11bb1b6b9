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
    "window_size": CheckInfo(BLOCKING, "rows", "window_end - window_start equals the window size"),
    "window_aligned": CheckInfo(BLOCKING, "rows", "window_start lies on the epoch-aligned slide grid"),
    "no_future_windows": CheckInfo(BLOCKING, "rows", "no window starts after the validation time"),
    "keys_not_null": CheckInfo(BLOCKING, "rows", "the grouping keys are never null"),
    "event_count_positive": CheckInfo(BLOCKING, "rows", "count aggregations are >= 1"),
    "values_in_range": CheckInfo(WARNING, "rows", "sum aggregations are within [0, 1e12]"),
    "unique_windows": CheckInfo(BLOCKING, "table", "one row per (window_start, window_end, keys)"),
    "freshness": CheckInfo(BLOCKING, "table", "the latest finalized window_end trails the latest source event "
                                              "by at most the freshness lag"),
    "reconciliation": CheckInfo(BLOCKING, "table", "per finalized window, the count equals the distinct source "
                                                   "events in it, less at most those that reached the source "
                                                   "after the job's watermark could have passed the window"),
}
