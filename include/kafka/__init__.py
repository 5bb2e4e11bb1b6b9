"""Kafka for the lakehouse: the broker `lakehouse kafka` starts from Kafka's jars (`broker`), where jobs find it
(`connection`), and what a checkpoint's offsets mean against the topic (`offsets`). confluent-kafka (the client of
Airflow's Kafka provider) is imported inside functions: the DAGs parse without it."""
