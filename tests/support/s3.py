"""The suite's S3 server: its bucket, and free ports for it (include/objectstore/server.py)."""

from __future__ import annotations

from include.objectstore.server import free_port as free_s3_port

BUCKET = "lakehouse-tests"

__all__ = ["BUCKET", "free_s3_port"]
