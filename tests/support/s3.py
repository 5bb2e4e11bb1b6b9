"""The suite's S3 server: its ports and bucket."""

from __future__ import annotations

import socket

from include.cluster.daemons import port_taken
from include.objectstore.server import ports

BUCKET = "lakehouse-tests"


def free_s3_port() -> int:
    """A port p on 127.0.0.1 with every port the S3 server derives from it free (include/objectstore/server.py)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 50000 and not any(port_taken("127.0.0.1", p) for p in ports(port).values()):
            return port
    raise RuntimeError("no free port range for the S3 server on 127.0.0.1")
