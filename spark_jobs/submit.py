"""spark-submit entry point: `spark-submit spark_jobs/submit.py <job> [--trigger ...] [--shuffle-partitions N]`.

Runs the same code path as `lakehouse run`; the master and resources come from spark-submit.
"""

import sys

from include.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
