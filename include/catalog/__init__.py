"""The catalog: every table by name in a Hive Metastore (include/catalog/metastore.py)."""
