"""Supervising the jobs, above the checkpoints: how a job is launched (:mod:`.launch`), the live drivers and their
groups (:mod:`.processes`, :mod:`.groups`, :mod:`.admission`), health and its report (:mod:`.health`,
:mod:`.health_report`), the live supervision policy (:mod:`.supervisor`) and the operational tables' maintenance
(:mod:`.ops_maintenance`). It may import the records (include/records), the checkpoints, the registry and storage.

Nothing here imports pyspark: the Airflow side (DAG tasks, callbacks) uses these modules.
"""
