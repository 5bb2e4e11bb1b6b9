"""A driver that loses its catalog (`python -m tests.support.catalog_loss FIRST JOB ...`): its session on the
metastore, it applies a full refresh of FIRST (the checkpoint action rebuilds it, and names its tables in the catalog)
and prints "on the catalog"; once the test has stopped the metastore and written a line to its stdin, it runs the other
jobs, as a long-lived driver starts a query again after its metastore died."""

from __future__ import annotations

import sys

from include.catalog_client.tables import on_catalog
from include.checkpoints.request import CheckpointRequest
from include.logging_setup import configure_logging
from include.registry import Trigger, load_registry
from include.settings import load_settings
from include.spark_session import get_spark
from spark_jobs.checkpoint_actions import apply
from spark_jobs.streaming_query import run_job


def main(first: str, job_ids: list[str]) -> None:
    settings = load_settings()
    configure_logging(settings)
    registry = load_registry(settings.registry_path)
    spark = get_spark(settings, app_name="catalog-loss")
    if not on_catalog(spark):
        raise SystemExit(f"no metastore answered at {settings.metastore_uri}: the session is not on the catalog")
    done = apply(spark, settings, registry, CheckpointRequest("full-refresh", (first,), actor="test"))
    if [row["outcome"] for row in done] != ["done"]:
        raise SystemExit(f"the full refresh of {first} was not done: {done}")
    sys.stdout.write("on the catalog\n")
    sys.stdout.flush()
    sys.stdin.readline()
    for job_id in job_ids:
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
