"""Kafka for the lakehouse: the broker `lakehouse kafka` starts from Kafka's jars (`broker`), where jobs find it
(`connection`), producing messages (`produce`), a source's starting options and the topics' offsets on the broker
(`offsets`); what a checkpoint's offsets mean against those is include/checkpoints/kafka_offsets.py. confluent-kafka
(the client of Airflow's Kafka provider) is imported inside functions: the DAGs parse without it."""
