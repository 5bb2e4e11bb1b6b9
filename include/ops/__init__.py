"""Supervising the jobs, the control plane above the engine (spark_jobs): how a job is launched (:mod:`.launch`), the
live drivers (:mod:`.processes`, :mod:`.admission`), health and its report (:mod:`.health`, :mod:`.health_report`),
the live supervision policy (:mod:`.supervisor`: what to do, decided from a snapshot; :mod:`.supervision`: doing it).
It may import the records (include/records), the checkpoints, the registry and storage.

Nothing here imports pyspark: the Airflow side (DAG tasks, callbacks) uses these modules.
"""
