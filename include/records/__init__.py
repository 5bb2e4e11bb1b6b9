"""The jobs' records, below the checkpoints that need them: one writer per checkpoint (:mod:`.lease`, and a group
driver's: :mod:`.groups`), stop requests (:mod:`.job_requests`), heartbeats, how each job of a shared driver ended
(:mod:`.run_outcomes`), the operational tables (progress, batch ledger, checkpoint audit, alerts, maintenance log,
data-quality results; appended through :mod:`.ops_tables`) and their maintenance (:mod:`.ops_maintenance`), the live
drivers' log rotation. It imports only the settings, the registry and storage; nothing imports pyspark.
"""
