"""Spark Structured Streaming jobs of the lakehouse and their spark-submit entry point."""
