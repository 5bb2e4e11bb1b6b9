# One image for Airflow and Spark: Python 3.11, Java 17, the pinned requirements and this project.
# Unlike the embedded default, an image build can reach Maven Central, so it also adds
# delta-spark's JVM jars (native format("delta") becomes available on the cluster).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
    && rm -rf /var/lib/apt/lists/*

ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    PYSPARK_PYTHON=/usr/local/bin/python \
    LAKEHOUSE_ROOT=/opt/lakehouse/data

WORKDIR /opt/lakehouse/app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt psycopg2-binary==2.9.13

ARG DELTA_VERSION=4.4.1
RUN SPARK_JARS="$(python -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
    && curl -fsSL -o "$SPARK_JARS/delta-spark_2.13-${DELTA_VERSION}.jar" \
       "https://repo1.maven.org/maven2/io/delta/delta-spark_2.13/${DELTA_VERSION}/delta-spark_2.13-${DELTA_VERSION}.jar" \
    && curl -fsSL -o "$SPARK_JARS/delta-storage-${DELTA_VERSION}.jar" \
       "https://repo1.maven.org/maven2/io/delta/delta-storage/${DELTA_VERSION}/delta-storage-${DELTA_VERSION}.jar"

COPY . .
RUN pip install --no-cache-dir --no-deps -e .
