"""Data quality of the gold tables (windows, sessions, joins): Great Expectations suites derived from
the job registry.

- :mod:`include.registry.checks`: the expectations by stable name, with their default severity
  (the one place severities are declared; a job's ``quality.severity`` in the registry overrides).
- :mod:`include.quality.suites`: per gold table, what its suite checks (derived from the registry; one
  table spec class per transform kind: base, aggregate, join, processor, rescued and scd modules).
- :mod:`include.quality.table_metrics`: the metrics the table checks assert on (the SCD tables':
  :mod:`include.quality.scd_metrics`).
- :mod:`include.quality.runner`: ``run_quality``, which validates, records ``_ops/dq_results`` and
  builds the Data Docs.
- :mod:`include.records.quality_results`: the results, the run's ``QualityReport`` and the ``_ops/dq_results`` table.

The package imports nothing heavy until ``run_quality`` is used: the registry imports
:mod:`include.registry.checks` to validate ``quality:`` sections, and DAG parsing must stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from include.quality.runner import QualityReport, run_quality

__all__ = ["QualityReport", "run_quality"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from include.quality import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'include.quality' has no attribute {name!r}")
