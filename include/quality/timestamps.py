"""Arrow timestamps as epoch microseconds, and epoch microseconds as ISO text: one conversion for the row
frames, the table metrics and reconciliation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MICROS = 1_000_000  # per second
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Timestamps (any unit or zone) as epoch microseconds, an int64 Arrow array with the nulls kept."""
    return pc.cast(pc.cast(column, pa.timestamp("us", tz="UTC")), pa.int64())


def epoch_micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Timestamps as epoch microseconds in numpy (float with NaN where null, else int64)."""
    return micros(column).to_numpy(zero_copy_only=False)


def iso(epoch_us: float | None) -> str | None:
    """Epoch microseconds (an integral value) as ISO 8601 text in UTC; None stays None."""
    # integer arithmetic: exact to the microsecond whatever the magnitude
    return None if epoch_us is None else (EPOCH + timedelta(microseconds=int(epoch_us))).isoformat()
