"""spark-submit entry point: `spark-submit spark_jobs/entrypoints/run_job.py <job> [--trigger ...] [--shuffle-partitions N]`.

What both DAGs launch (include.ops.launch); the master and resources come from spark-submit.
"""

import sys

from spark_jobs.job_process import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
