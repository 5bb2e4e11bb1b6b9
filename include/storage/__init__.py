"""Storage, the lowest floor: the storage interface over a local path or an S3 key (:mod:`.paths`, :mod:`.s3`), the
lakehouse layout (:mod:`.layout`: every path in one place), Delta tables' logs and the operational tables through
delta-rs (:mod:`.delta`, on :mod:`.delta_open`, where a path becomes a delta-rs table), the one reader of a table's
rows (:mod:`.reader`), small state files (:mod:`.files`).
It imports nothing of the project but the registry's column types.
"""
