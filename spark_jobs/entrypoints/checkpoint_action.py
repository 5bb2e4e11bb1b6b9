"""spark-submit entry point of checkpoint actions: `spark-submit spark_jobs/entrypoints/checkpoint_action.py <mode> <job>... [options]`."""

import sys

from spark_jobs.checkpoint_actions import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
