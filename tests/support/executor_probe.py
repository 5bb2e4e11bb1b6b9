"""Run on a cluster (LAKEHOUSE_SPARK_MASTER): where the executors' Python workers import the project's code from, and
their working directory, as JSON lines on stdout."""

from __future__ import annotations

import json

from include.settings import load_settings
from include.spark_session import get_spark


def where(batches):
    import os

    import pandas as pd

    import spark_jobs.processors.sessionizer as shipped

    for _ in batches:
        yield pd.DataFrame({"module": [shipped.__file__], "cwd": [os.getcwd()]})


if __name__ == "__main__":
    spark = get_spark(load_settings(), app_name="lakehouse-executor-probe")
    for row in spark.range(2, numPartitions=2).mapInPandas(where, "module string, cwd string").collect():
        print(json.dumps(row.asDict()))
    spark.stop()
