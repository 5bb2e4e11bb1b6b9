-- The catalog's database beside Airflow's, in docker-compose.yaml's PostgreSQL (`lakehouse cluster up` makes the same
-- one with a password of its own: include/cluster/postgres.py).
CREATE ROLE metastore LOGIN PASSWORD 'metastore';
CREATE DATABASE metastore OWNER metastore ENCODING 'UTF8' TEMPLATE template0;
