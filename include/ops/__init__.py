"""Operating the jobs: one writer per checkpoint (:mod:`.lease`), stop requests, heartbeats, progress
records, alerts, how a job is launched (:mod:`.launch`), live processes (:mod:`.processes`), health
(:mod:`.health`) and the live supervision policy (:mod:`.supervisor`).

Nothing here imports pyspark: the Airflow side (DAG tasks, callbacks) uses these modules.
"""
