"""spark-submit entry point of table maintenance: `spark-submit spark_jobs/entrypoints/maintain_tables.py [<table>...] [--run-id ID]`."""

import sys

from spark_jobs.table_maintenance import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
