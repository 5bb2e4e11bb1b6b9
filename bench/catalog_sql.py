"""Benchmark: reading a gold table by name through the SQL endpoint beside reading its path in a Spark session, and
`catalog sync` over many tables, in one run.

    .venv/bin/python bench/catalog_sql.py [--events 200000] [--files 4] [--repeat 5] [--tables 100]

A scratch lakehouse with its own catalog (`lakehouse catalog up` on a free port, Derby), the clickstream lineage run
once (`lakehouse run`: its jobs name their tables), then:

- **By name through the endpoint**: `lakehouse sql up` (Spark's Thrift server over the catalog), one beeline session
  (JDBC) that runs each statement `--repeat` times after an untimed first run; the seconds are the ones beeline
  reports per statement (the server's answer: the client's own JVM start is not counted).
- **By path in a Spark session**: the same two statements on `spark.read.format("delta").load(path)` in a local
  driver (the product's session, without the catalog), timed the same way after an untimed first run.
- Statements: `SELECT count(*)` of gold.user_activity_5m, and a one-day aggregate (events and value per user over
  the first day of the data). Goal: the catalog and the endpoint add at most 1 s to each (median against median).
- **Sync**: `--tables` small Delta tables (written by delta-rs) registered in a Spark session on the catalog by the
  code `catalog sync` runs (include/catalog_client/tables.py: register): the first pass registers each, the second finds
  every one right and changes nothing.

Prints one JSON document (the figures, the differences, a verdict per goal).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import options  # noqa: E402
from include.catalog_client.tables import NamedTable, register  # noqa: E402
from include.daemons import free_port_block  # noqa: E402
from include.generator import GeneratorConfig, write_landing  # noqa: E402
from include.settings import load_settings  # noqa: E402

JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")
TABLE = "gold.user_activity_5m"


def statements(day: str) -> dict[str, str]:
    return {"count": f"SELECT count(*) FROM {TABLE}",
            "one_day": f"SELECT user_id, sum(event_count) AS events, sum(total_value) AS value FROM {TABLE} "
                       f"WHERE window_start >= TIMESTAMP '{day} 00:00:00' AND "
                       f"window_start < TIMESTAMP '{day} 00:00:00' + INTERVAL 1 DAY GROUP BY user_id"}


def cli(args: list[str], env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "include.cli", *args], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        raise SystemExit(f"lakehouse {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result


def through_endpoint(settings, env: dict, sql: dict[str, str], repeat: int) -> dict[str, list[float]]:
    """Each statement 1 + `repeat` times in one beeline session: the seconds beeline reports, the first dropped."""
    from include.catalog import sql_endpoint
    from include.daemons import spark_home

    script = "".join(f"{statement};\n" for statement in sql.values() for _ in range(repeat + 1))
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
        file.write(script)
    result = subprocess.run([str(spark_home() / "bin" / "beeline"), "-u", sql_endpoint.jdbc_url(settings),
                             "-n", settings.sql_user, "-p", sql_endpoint.password(settings), "-f", file.name],
                            env={**env, "SPARK_HOME": str(spark_home())}, capture_output=True, text=True, timeout=1800)
    os.unlink(file.name)
    seconds = [float(s) for s in re.findall(r"rows? selected \((\d+\.\d+) seconds\)", result.stdout + result.stderr)]
    if len(seconds) != len(sql) * (repeat + 1):
        raise SystemExit(f"beeline answered {len(seconds)} of {len(sql) * (repeat + 1)} statements:\n"
                         f"{(result.stdout + result.stderr)[-3000:]}")
    per = repeat + 1
    return {name: seconds[i * per + 1:(i + 1) * per] for i, name in enumerate(sql)}


def by_path(settings, sql: dict[str, str], repeat: int) -> dict[str, list[float]]:
    """The same statements over the table's path in a local session (no catalog), timed after a first run."""
    from include.spark_session import get_spark

    spark = get_spark(replace(settings, metastore_uri_set=True, metastore_uri="thrift://127.0.0.1:1"),
                      app_name="bench-by-path")
    try:
        spark.read.format("delta").load(settings.layout.table("gold/user_activity_5m").uri) \
            .createOrReplaceTempView("by_path")
        times = {}
        for name, statement in sql.items():
            query = statement.replace(TABLE, "by_path")
            runs = []
            for _ in range(repeat + 1):
                started = time.perf_counter()
                spark.sql(query).collect()
                runs.append(time.perf_counter() - started)
            times[name] = runs[1:]
        return times
    finally:
        spark.stop()


def sync_many(settings, count: int) -> dict:
    """`count` small Delta tables registered by the code `catalog sync` runs: both passes timed."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from include.spark_session import get_spark

    tables = []
    for n in range(count):
        location = settings.layout.table(f"bench/table_{n:03d}")
        write_deltalake(str(location), pa.table({"id": [n], "value": [float(n)]}))
        tables.append(NamedTable(f"bench.table_{n:03d}", location))
    spark = get_spark(settings, app_name="bench-sync")
    try:
        started = time.perf_counter()
        first = register(spark, settings, tables)
        first_seconds = time.perf_counter() - started
        started = time.perf_counter()
        second = register(spark, settings, tables)
        second_seconds = time.perf_counter() - started
    finally:
        spark.stop()
    return {"tables": count, "first_pass_seconds": round(first_seconds, 1), "registered": len(first),
            "second_pass_seconds": round(second_seconds, 1), "changed_on_second_pass": len(second)}


def main() -> None:
    args = options(__doc__, events=200_000, files=4, repeat=5, tables=100).parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="lakehouse-bench-catalog-"))
    root = scratch / "lakehouse"
    env = {**os.environ, "LAKEHOUSE_ROOT": str(root), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_METASTORE_URI": f"thrift://127.0.0.1:{free_port_block([0])}",
           "LAKEHOUSE_SQL_PORT": str(free_port_block([0])), "LAKEHOUSE_LOG_LEVEL": "WARNING"}
    env.pop("LAKEHOUSE_REGISTRY", None)
    os.environ.update({k: env[k] for k in ("LAKEHOUSE_ROOT", "LAKEHOUSE_METASTORE_URI", "LAKEHOUSE_SQL_PORT")})
    settings = load_settings()
    landed = write_landing(settings.layout.landing("landing/clickstream"), "clickstream",
                           GeneratorConfig(events=args.events, seed=3, files=args.files))
    cli(["catalog", "up"], env, timeout=300)
    try:
        started = time.perf_counter()
        cli(["run", *JOBS], env)
        lineage_seconds = time.perf_counter() - started
        from include.generator import DEFAULT_START

        sql = statements(DEFAULT_START.date().isoformat())
        cli(["sql", "up"], env, timeout=600)
        try:
            endpoint = through_endpoint(settings, env, sql, args.repeat)
        finally:
            cli(["sql", "down"], env)
        path = by_path(settings, sql, args.repeat)
        sync = sync_many(settings, args.tables)
    finally:
        cli(["catalog", "down"], env)

    figures = {}
    for name in sql:
        by_name, direct = statistics.median(endpoint[name]), statistics.median(path[name])
        figures[name] = {"endpoint_median_s": round(by_name, 3), "path_median_s": round(direct, 3),
                         "added_s": round(by_name - direct, 3), "endpoint_runs": endpoint[name],
                         "path_runs": [round(s, 3) for s in path[name]]}
    print(json.dumps({"events": landed.lines, "lineage_seconds": round(lineage_seconds, 1), "statements": figures,
                      "sync": sync, "goals": {
                          "endpoint adds <= 1 s": all(f["added_s"] <= 1.0 for f in figures.values()),
                          "second sync changes nothing": sync["changed_on_second_pass"] == 0}}, indent=1))


if __name__ == "__main__":
    main()
