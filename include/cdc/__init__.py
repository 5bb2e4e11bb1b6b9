"""Change data capture's infrastructure: the database whose changes are captured (a team's, or the local one the
product starts: `database`), the product's publication and replication slot in it (`slots`), the Kafka Connect
worker (`connect`) and Debezium's connectors on it (`connectors`), the chain `lakehouse cdc up | down | status`
brings up and down (`chain`), their health (`health`), and the demo database's generator (`shop`). Beside
include/kafka, below the checkpoints (the preflight calls `database.check_source`) and the control plane; psycopg2
only inside functions."""
