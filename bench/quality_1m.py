"""Benchmark: validate a 1M-row windowed gold table (and its 1M silver events) with the quality suite.

    .venv/bin/python bench/quality_1m.py [--users 10000] [--windows 100]

Prints the seconds of a full `run_quality` of gold/user_activity_5m (goal: <= 15 s on 2 cores; pandas
engine, below the Spark threshold), then of an incremental run after one more commit of 10,000 rows
(row checks on the new rows only; the table checks always read the whole table and its source).
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import options  # noqa: E402
from include.quality import run_quality  # noqa: E402
from include.registry import load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402

START = 1_767_225_600  # 2026-01-01T00:00:00Z


def main() -> None:
    args = options(__doc__, users=10_000, windows=100).parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = replace(load_settings(), root=Path(tempfile.mkdtemp(prefix="lakehouse-dq-bench-")))
    registry = load_registry(settings.registry_path)
    n = args.users * args.windows
    users = np.tile(np.array([f"user_{u:05d}" for u in range(args.users)]), args.windows)
    starts = np.repeat(START + 300 * np.arange(args.windows), args.users)
    event_times = starts + 60
    micros = pa.timestamp("us", tz="UTC")
    silver = pa.table({
        "event_id": pa.array([f"e{i}" for i in range(n)]), "user_id": users, "event_type": pa.array(["click"] * n),
        "value": np.ones(n), "event_time": pa.array(event_times * 1_000_000, micros),
        "_source_file": pa.array(["bench"] * n), "_ingested_at": pa.array(event_times * 1_000_000, micros),
    })
    gold = pa.table({
        "window_start": pa.array(starts * 1_000_000, micros), "window_end": pa.array((starts + 300) * 1_000_000, micros),
        "user_id": users, "event_count": np.ones(n, dtype=np.int64), "total_value": np.ones(n),
    })
    for table, data in (("silver/clickstream", silver), ("gold/user_activity_5m", gold)):
        delta_store.ensure_table(settings.layout.table(table), registry.table_schemas[table])
        write_deltalake(str(settings.layout.table(table)), data, mode="append")
    started = time.perf_counter()
    report = run_quality(settings, registry, ["gold/user_activity_5m"], full=True)
    seconds = time.perf_counter() - started
    later = START + 300 * args.windows
    extra = gold.slice(0, 10_000).set_column(0, "window_start", pa.array(np.full(10_000, later * 1_000_000), micros))
    extra = extra.set_column(1, "window_end", pa.array(np.full(10_000, (later + 300) * 1_000_000), micros))
    write_deltalake(str(settings.layout.table("gold/user_activity_5m")), extra, mode="append")
    started = time.perf_counter()
    incremental = run_quality(settings, registry, ["gold/user_activity_5m"])
    incremental_seconds = time.perf_counter() - started
    print(json.dumps({"gold_rows": n, "seconds": round(seconds, 1),
                      "incremental_rows": 10_000, "incremental_seconds": round(incremental_seconds, 1),
                      "blocking_failures": len(report.blocking_failures) + len(incremental.blocking_failures),
                      "failed": sorted(report.failed() | incremental.failed())}, indent=2))
    shutil.rmtree(settings.root, ignore_errors=True)


if __name__ == "__main__":
    main()
