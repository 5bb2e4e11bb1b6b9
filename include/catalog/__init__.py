"""The catalog the product runs, part of the control plane: the Hive Metastore (:mod:`.metastore`), the SQL endpoint
(:mod:`.sql_endpoint`) and `lakehouse query` (:mod:`.query`). The tables' names and their registration, which every
job needs, are the client side's (include/catalog_client/tables.py). It may import the client side, Spark sessions,
the launch path (include/ops) and everything below them."""
