"""The run whose classes the Spark driver's class-data archive holds (include/jvm_archive.py builds it): a few small
jobs, available-now, on a local lakehouse and then, when one is given, on S3.

`python -m spark_jobs.jvm_warm_up <s3 root or -> <job>...`, with the archive's JVM option in
LAKEHOUSE_SPARK_JAVA_OPTIONS; the JVM writes the archive as it exits."""

from __future__ import annotations

import sys
from dataclasses import replace

from include.generator import GeneratorConfig, write_landing
from include.registry import Trigger, load_registry
from include.settings import load_settings
from include.spark_session import get_spark
from spark_jobs.streaming_query import run_job


def main(argv: list[str]) -> int:
    s3_root, jobs = argv[0], argv[1:]
    settings = load_settings()
    registry = load_registry(settings.registry_path)
    spark = get_spark(settings, app_name="lakehouse-jvm-archive")
    for each in [settings] + ([replace(settings, root=s3_root)] if s3_root != "-" else []):
        write_landing(each.layout.landing(registry.job(jobs[0]).source.path), "clickstream",
                      GeneratorConfig(events=300, seed=1, files=2))
        for job_id in jobs:
            run_job(spark, each, registry, job_id, Trigger(available_now=True))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
