"""Spark Structured Streaming jobs of the lakehouse: the engine, above the library (include/) it imports and below
the control plane (include/ops, include/airflow, include/cli, include/cluster), which it never imports
(tests/test_layers.py).

- :mod:`.job_process` and :mod:`.driver` (+ :mod:`.group_driver`): a job process, the driver it runs in, several
  jobs side by side.
- :mod:`.streaming_query`: one job as a streaming query; around it :mod:`.query_session` (its session settings),
  :mod:`.watermark_replay` (a killed run's owed no-data batch), :mod:`.query_watch` (lease, stop requests, registry
  watch while it runs), :mod:`.run_result` (how it ended).
- :mod:`.transforms` (+ :mod:`.processors`, :mod:`.schemas`): the streaming DataFrame of each transform kind.
- :mod:`.batch_writer`: the exactly-once foreachBatch sink; :mod:`.delta_tables`: the tables from the registry;
  :mod:`.progress_listener`: each batch's progress record and heartbeat.
- :mod:`.evolution`: schema changes applied by a start; :mod:`.checkpoint_actions`: the checkpoint actions.
- :mod:`.jvm_warm_up`: the run the driver's class-data archive is dumped from.
- :mod:`.entrypoints`: the scripts spark-submit runs (on top: nothing imports them).
"""
