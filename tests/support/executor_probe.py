"""Run on a cluster (LAKEHOUSE_SPARK_MASTER): where the executors' Python workers import the project's code from,
their working directory and their executor's JVM options (`-XX:` ones), as JSON lines on stdout."""

from __future__ import annotations

import json

from include.settings import load_settings
from include.spark_session import get_spark


def where(batches):
    import os

    import pandas as pd

    import spark_jobs.processors.sessionizer as shipped

    pid, options = os.getpid(), []
    while pid > 1 and not options:  # up from the Python worker (and pyspark's daemon) to the executor's JVM
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline") as cmdline:
            args = cmdline.read().split("\0")
        if args[0].endswith("java"):
            options = [a for a in args if a.startswith("-XX:")] or ["none"]
    for _ in batches:
        yield pd.DataFrame({"module": [shipped.__file__], "cwd": [os.getcwd()], "jvm": [" ".join(options)]})


if __name__ == "__main__":
    spark = get_spark(load_settings(), app_name="lakehouse-executor-probe")
    for row in spark.range(2, numPartitions=2).mapInPandas(where, "module string, cwd string, jvm string").collect():
        print(json.dumps(row.asDict()))
    spark.stop()
