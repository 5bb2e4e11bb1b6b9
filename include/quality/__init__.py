"""Data quality of the windowed gold tables: Great Expectations suites derived from the registry."""

from include.quality.runner import QualityReport, run_quality

__all__ = ["QualityReport", "run_quality"]
