# Bootstrap: a project-local virtualenv with pinned requirements, then the project (editable).
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Delta Lake's JVM jars, fetched once with Maven (include/jars/pom.xml pins them); runs never resolve jars.
JARS_DIR ?= $(or $(LAKEHOUSE_JARS_DIR),.cache/jars)
JARS_STAMP := $(JARS_DIR)/.fetched

.PHONY: demo test test-unit lint bench airflow clean

$(STAMP): requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "Python 3.11 is required ($(PYTHON) not found); set PYTHON=/path/to/python3.11"; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip==26.3"
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

$(JARS_STAMP): include/jars/pom.xml
	@command -v java >/dev/null 2>&1 || { echo "Java 17 or 21 is required: apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"; exit 2; }
	@command -v mvn >/dev/null 2>&1 || { echo "Maven is needed once, to fetch the Delta jars into $(JARS_DIR): apt-get install maven"; exit 2; }
	rm -rf "$(JARS_DIR)" && mkdir -p "$(JARS_DIR)"
	mvn -q -B -f include/jars/pom.xml dependency:copy-dependencies -DoutputDirectory="$(abspath $(JARS_DIR))"
	@touch $@

demo: $(STAMP) $(JARS_STAMP)
	$(VENV)/bin/lakehouse demo

test: $(STAMP) $(JARS_STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

# The unit tier: no Spark, no Airflow (seconds). `make test` runs everything.
test-unit: $(STAMP) $(JARS_STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m "not spark and not airflow"

# Airflow standalone (SQLite, LocalExecutor) with this project's DAGs and connections.
airflow: $(STAMP) $(JARS_STAMP)
	$(VENV)/bin/lakehouse airflow-setup
	@echo "Airflow UI: http://localhost:8080  (user: admin; the password is printed by 'standalone' below and kept in $${AIRFLOW_HOME:-$(CURDIR)/airflow_home}/simple_auth_manager_passwords.json.generated)"
	$(VENV)/bin/lakehouse airflow standalone

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP) $(JARS_STAMP)
	$(PY) bench/backfill_vs_batch.py
	$(PY) bench/delta_sink_vs_parquet.py
	$(PY) bench/repartition_vs_full_refresh.py
	$(PY) bench/small_files_catch_up.py
	$(PY) bench/quality_1m.py
	$(PY) bench/dag_parse.py

clean:
	rm -rf lakehouse airflow_home .pytest_cache
