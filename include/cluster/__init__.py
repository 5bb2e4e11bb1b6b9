"""`lakehouse cluster`: the production topology (PostgreSQL, Airflow's components, a Spark standalone cluster,
Kafka) as processes on this machine."""
