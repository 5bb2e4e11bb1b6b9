"""The catalog the product runs: every table by name in a Hive Metastore (:mod:`.metastore`), registered and kept
true (:mod:`.tables`), the SQL endpoint (:mod:`.sql_endpoint`) and `lakehouse query` (:mod:`.query`). It may import
the client side (include/catalog_client), Spark sessions, the launch path (include/ops) and everything below them."""
