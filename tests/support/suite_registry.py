"""The registry the suite runs: `include/jobs.yaml` as shipped but for its default state partitions.

A stateful job's every micro-batch costs per state partition (a RocksDB instance loaded and committed, its snapshot
written, a task, the processors' state encoders): with 2 instead of the shipped 4, the in-driver stateful modules
(tests/test_stateful.py, test_joins.py and the pipeline backfill) used 303-305 CPU-seconds instead of 361-366
(docs/benchmarks.md). Two partitions still spread keys over several state stores; the tests that change the count
change it from SUITE_STATE_PARTITIONS; `lakehouse demo` runs the registry as shipped (tests/conftest.py `demo`).
"""

from __future__ import annotations

import re
from pathlib import Path

from include.settings import PACKAGE_DIR

SHIPPED_REGISTRY = PACKAGE_DIR / "jobs.yaml"
SHIPPED_STATE_PARTITIONS = 4
SUITE_STATE_PARTITIONS = 2
# the `defaults.state_store` line, its comment kept (the rest of the file too: tests edit the text as a person would)
_DEFAULT_PARTITIONS = re.compile(rf"^(    shuffle_partitions: ){SHIPPED_STATE_PARTITIONS}$", re.MULTILINE)


def write_suite_registry(directory: Path) -> Path:
    """`include/jobs.yaml` with SUITE_STATE_PARTITIONS as `defaults.state_store.shuffle_partitions`, written to
    `directory`; a ValueError when the shipped default is not the one line this expects."""
    text = SHIPPED_REGISTRY.read_text()
    suite, count = _DEFAULT_PARTITIONS.subn(rf"\g<1>{SUITE_STATE_PARTITIONS}", text)
    if count != 1:
        raise ValueError(f"{SHIPPED_REGISTRY}: expected one `    shuffle_partitions: {SHIPPED_STATE_PARTITIONS}` line "
                         f"under defaults.state_store, found {count}: update tests/support/suite_registry.py")
    path = directory / "jobs.yaml"
    path.write_text(suite)
    return path
