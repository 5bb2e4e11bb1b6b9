"""`lakehouse cluster`: the production topology (PostgreSQL, Airflow's components, a Spark standalone cluster,
Kafka, the catalog, the S3 server) as processes on this machine. The top of the library: it may import every
package that starts a part (airflow's environment, catalog, kafka, objectstore, daemons); nothing imports it but
the command line.
"""
