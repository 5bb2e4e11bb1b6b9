"""Monitoring by the tools operators run: the lakehouse's metrics endpoint with Alertmanager's webhook
(:mod:`.endpoint`, :mod:`.webhook`), the alert rules generated from the registry (:mod:`.rules`), the configuration
files (:mod:`.configs`), and Prometheus with Alertmanager started, stopped and asked by `lakehouse monitor`
(:mod:`.stack`)."""
