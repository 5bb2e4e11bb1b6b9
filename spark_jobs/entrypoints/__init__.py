"""The scripts spark-submit runs (by path; each one line into the package it starts): a job (`run_job.py`), a
checkpoint action (`checkpoint_action.py`), the tables' maintenance (`maintain_tables.py`). A package of its own, on
top of spark_jobs: nothing imports it."""
