-- The catalog's database beside Airflow's, in docker-compose.yaml's PostgreSQL (`lakehouse cluster up` makes the same
-- one with a password of its own: include/cluster/postgres.py).
CREATE ROLE metastore LOGIN PASSWORD 'metastore';
CREATE DATABASE metastore OWNER metastore ENCODING 'UTF8' TEMPLATE template0;
-- A killed scheduler's transaction, held open by the task workers it forked, would lock its dag runs for good:
-- ended after two minutes idle (include/cluster/postgres.py, AIRFLOW_IDLE_TRANSACTIONS).
ALTER ROLE airflow SET idle_in_transaction_session_timeout = '2min';
