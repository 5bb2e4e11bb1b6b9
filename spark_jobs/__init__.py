"""Spark Structured Streaming jobs of the lakehouse, above the library (include/) they import.

- :mod:`.job_process` and :mod:`.driver` (+ :mod:`.group_driver`): a job process, the driver it runs in, several
  jobs side by side.
- :mod:`.streaming_query`: one job as a streaming query, with its lease, stop requests and heartbeat.
- :mod:`.transforms` (+ :mod:`.processors`, :mod:`.schemas`): the streaming DataFrame of each transform kind.
- :mod:`.batch_writer`: the exactly-once foreachBatch sink; :mod:`.delta_tables`: the tables from the registry.
- :mod:`.evolution`: schema changes applied by a start; :mod:`.checkpoint_actions`: the checkpoint actions.
- :mod:`.entrypoints`: the scripts spark-submit runs (on top: nothing imports them).
"""
