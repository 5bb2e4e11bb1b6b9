"""The lakehouse library: settings, job registry, Delta storage, checkpoints, observability."""
