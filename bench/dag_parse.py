"""Benchmark: how long parsing the dags/ folder takes (Airflow imported first, then timed alone).

    .venv/bin/python bench/dag_parse.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import os

    from include.airflow.environment import airflow_environment
    from include.settings import load_settings

    os.environ.update(airflow_environment(load_settings()))
    from airflow.dag_processing.dagbag import DagBag

    folder = Path(__file__).resolve().parent.parent / "dags"
    timings = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        bag = DagBag(dag_folder=str(folder))
        timings.append(time.perf_counter() - started)
        assert not bag.import_errors, bag.import_errors
    print(json.dumps({"dags": sorted(bag.dags), "first_parse_seconds": round(timings[0], 3),
                      "median_parse_seconds": round(statistics.median(timings), 3)}, indent=2))


if __name__ == "__main__":
    main()
