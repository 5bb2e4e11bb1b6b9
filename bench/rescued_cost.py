"""Benchmark: what bronze's rescued-data column costs. The clickstream's bronze parse (spark_jobs.transforms.parse_json)
over landed lines, the good rows written to Spark's no-op sink, with and without `_rescued` (without it, Spark prunes
the second parse that finds the fields the schema does not name); a third of the lines carry such a field.

    .venv/bin/python bench/rescued_cost.py [--lines 300000] [--repeats 3]

Why: `_rescued` parses every line a second time (into a map of variants); this says what that costs a backfill.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import finish, good_rows, options, warm_up  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.registry import RESCUED_COLUMN, load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from spark_jobs.transforms import parse_json  # noqa: E402


def add_field(files: list[Path]) -> None:
    """A `device` field (not in the schema) on every third line that is a JSON object."""
    for path in files:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if number % 3 == 0 and line.startswith("{") and line.endswith("}"):
                lines[number] = line[:-1] + ', "device": "tablet"}'
        path.write_text("\n".join(lines) + "\n")


def timed(frame, repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds), 2)


def main() -> None:
    args = options(__doc__, lines=300_000, repeats=3).parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-rescued-"))
    settings = replace(load_settings(), root=work / "lakehouse")
    spark = get_spark(settings, app_name="bench-rescued")
    warm_up(spark, work)
    landing = settings.layout.landing("landing/clickstream")
    landed = write_landing(landing, "clickstream", GeneratorConfig(events=args.lines, seed=7, files=8))
    add_field(landed.files)
    job = load_registry(settings.registry_path).job("bronze_clickstream")
    rows = good_rows(parse_json(spark.read.format("text").load(str(landing)), job), job)
    without = rows.drop(RESCUED_COLUMN)
    timed(rows, 1)  # the first pass reads the files into the OS cache
    result = {"lines": landed.lines, "seconds_with_rescued": timed(rows, args.repeats),
              "seconds_without_rescued": timed(without, args.repeats),
              "rows_with_rescued": rows.where(f"{RESCUED_COLUMN} IS NOT NULL").count()}
    result["cost_ratio"] = round(result["seconds_with_rescued"] / result["seconds_without_rescued"], 2)
    finish(spark, work, result)


if __name__ == "__main__":
    main()
