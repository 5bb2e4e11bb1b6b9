"""Spark Structured Streaming jobs of the lakehouse.

- :mod:`.entrypoint` (+ `submit.py` for spark-submit): a job process, its arguments and exit codes.
- :mod:`.runner`: one job as a streaming query, with its lease, stop requests and heartbeat.
- :mod:`.transforms`: the streaming DataFrame of each transform kind, from the typed registry spec.
- :mod:`.batch_writer`: the exactly-once foreachBatch sink.
- :mod:`.listener`: progress records and heartbeats from Spark's listener bus.
- :mod:`.hooks`: the batch-hook seam (no-op unless installed).
"""
