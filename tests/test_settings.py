"""The configuration table (include/settings.py's SETTINGS): every variable's default loads, every checked kind names
the variable and the value it refuses, and the reference rendered from the table covers every variable and every
Settings field filled from the environment. In-process and fast: no Spark, no servers, no subprocesses."""

from __future__ import annotations

import ast
import os
import socket
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from include import settings as settings_module
from include.settings import SETTINGS, Kind, Settings, load_settings, read_setting
from include.settings_reference import configuration_reference
from include.storage.s3 import S3Config

DERIVED = {"kafka_bootstrap_set": "LAKEHOUSE_KAFKA_BOOTSTRAP", "metastore_uri_set": "LAKEHOUSE_METASTORE_URI"}
ROWS = {setting.name: setting for setting in SETTINGS}

# A bad value of every checked kind, and of each variable with its own parse, with the one line it is refused with.
BAD_VALUES = [
    ("LAKEHOUSE_LEASE_SECONDS", "x", "LAKEHOUSE_LEASE_SECONDS must be a whole number of seconds, at least 3, got 'x'"),
    ("LAKEHOUSE_LEASE_SECONDS", "2", "LAKEHOUSE_LEASE_SECONDS must be a whole number of seconds, at least 3, got '2'"),
    ("LAKEHOUSE_TASK_RETRIES", "-1", "LAKEHOUSE_TASK_RETRIES must be a non-negative integer, got '-1'"),
    ("LAKEHOUSE_LIVE_DRIVERS", "0", "LAKEHOUSE_LIVE_DRIVERS must be a positive integer, got '0'"),
    ("LAKEHOUSE_SPARK_POOL_SLOTS", "1.5", "LAKEHOUSE_SPARK_POOL_SLOTS must be a positive integer, got '1.5'"),
    ("LAKEHOUSE_LOG_MAX_BYTES", "²", "LAKEHOUSE_LOG_MAX_BYTES must be a whole number of bytes, at least 1024, got '²'"),
    ("LAKEHOUSE_AIRFLOW_HISTORY_DAYS", "0", "LAKEHOUSE_AIRFLOW_HISTORY_DAYS must be a positive whole number of days, "
                                           "got '0'"),
    ("LAKEHOUSE_STOP_GRACE_SECONDS", "soon", "LAKEHOUSE_STOP_GRACE_SECONDS must be a number of seconds, got 'soon'"),
    ("LAKEHOUSE_SQL_PORT", "65536", "LAKEHOUSE_SQL_PORT must be a port number (1-65535), got '65536'"),
    ("LAKEHOUSE_SPARK_LOG_LEVEL", "loud", "LAKEHOUSE_SPARK_LOG_LEVEL must be one of TRACE, DEBUG, INFO, WARN, ERROR, "
                                          "FATAL, OFF, got 'LOUD'"),
    ("LAKEHOUSE_S3_ENDPOINT", "ftp://h/", "LAKEHOUSE_S3_ENDPOINT must be an http:// or https:// URL, or `aws`, got "
                                          "'ftp://h'"),
    ("LAKEHOUSE_METASTORE_URI", "http://h:9083", "LAKEHOUSE_METASTORE_URI must be thrift://host:port, got "
                                                 "'http://h:9083'"),
    ("LAKEHOUSE_METASTORE_DB", "mysql://u:secret@h:1/db", "LAKEHOUSE_METASTORE_DB must be "
                                                          "postgresql://user:password@host:port/database, got mysql://.../db"),
    ("LAKEHOUSE_CDC_DATABASE_URL", "postgresql://secret@h:5432", "LAKEHOUSE_CDC_DATABASE_URL must be "
                                                                 "postgresql://user:password@host:port/database, got "
                                                                 "postgresql://..."),  # no database; nor a secret said
    ("LAKEHOUSE_CDC_DATABASE_URL", "postgresql://u:secret@h:x/shop", "LAKEHOUSE_CDC_DATABASE_URL must be "
                                                                     "postgresql://user:password@host:port/database, "
                                                                     "got postgresql://.../shop"),
    ("LAKEHOUSE_CONNECT_URL", "127.0.0.1:8083", "LAKEHOUSE_CONNECT_URL must be http://host:port, got '127.0.0.1:8083'"),
    ("LAKEHOUSE_KAFKA_BOOTSTRAP", "broker", "LAKEHOUSE_KAFKA_BOOTSTRAP must be host:port (comma-separated for several "
                                            "brokers), got 'broker'"),
    ("LAKEHOUSE_ROOT", "ftp://h/lake", "LAKEHOUSE_ROOT: 'ftp://h/lake': storage is a local path or an S3 URI "
                                       "(s3://bucket/prefix)"),
]
ANYTHING_GOES = {Kind.TEXT, Kind.FLAG, Kind.PATH}  # kinds no value is refused of (a flag: `1` on, anything else off)


@pytest.fixture
def unset(monkeypatch):
    """No variable of the table set (the suite's own, set in conftest.pytest_configure, removed too)."""
    for setting in SETTINGS:
        monkeypatch.delenv(setting.name, raising=False)
    return monkeypatch


def filled_fields() -> set[str]:
    """The Settings fields load_settings fills from the environment (`s3.<field>` for the S3Config's)."""
    top = {each.name for each in fields(Settings)} - set(DERIVED)
    return (top - {"s3"}) | {f"s3.{each.name}" for each in fields(S3Config)}


def test_every_default_loads_and_is_the_settings_default(unset):
    loaded = load_settings()
    for setting in SETTINGS:
        read_setting(setting)  # each row's default parses and passes its own check
    assert (loaded.spark_pool_slots, loaded.host_name) == (max(1, (os.cpu_count() or 2) // 2), socket.gethostname())
    assert loaded.root == settings_module.LocalPath(settings_module.REPO_ROOT / "lakehouse") and loaded.local_dir is None
    assert loaded.registry_path == settings_module.PACKAGE_DIR / "jobs.yaml"
    assert not loaded.kafka_bootstrap_set and not loaded.metastore_uri_set
    assert (loaded.s3.endpoint, loaded.s3.region) == ("http://127.0.0.1:8333", "us-east-1")
    # the defaults live in the table only: the Settings class declares none (nothing builds it but load_settings)
    assert [each.name for each in fields(Settings) if each.default is not MISSING or each.default_factory
            is not MISSING] == []


@pytest.mark.parametrize(("name", "value", "problem"), BAD_VALUES)
def test_a_bad_value_is_one_line_naming_the_variable_and_the_value(unset, name, value, problem):
    unset.setenv(name, value)
    with pytest.raises(ValueError) as refused:
        load_settings()
    assert str(refused.value) == problem
    assert "\n" not in problem and problem.startswith(name)


def test_every_checked_variable_refuses_a_bad_value(unset):
    """Beyond the cases above: each row of a checked kind refuses a value that is not a number (and, with a minimum,
    the number below it), named in one line."""
    for setting in SETTINGS:
        if setting.kind in ANYTHING_GOES:
            continue
        bad = ["many"] if setting.kind in (Kind.WHOLE, Kind.PORT, Kind.NUMBER, Kind.CHOICE) else []
        if setting.kind is Kind.WHOLE and setting.minimum:
            bad.append(str(setting.minimum - 1))
        bad += [value for name, value, _ in BAD_VALUES if name == setting.name]
        assert bad, f"{setting.name}: no bad value tried"
        for value in bad:
            unset.setenv(setting.name, value)
            with pytest.raises(ValueError) as refused:
                load_settings()
            assert str(refused.value).startswith(setting.name) and "\n" not in str(refused.value), refused.value
            shown = value.strip().rstrip("/").upper() if setting.upper else value.strip().rstrip("/")
            # a database URL is not echoed: it may hold a password
            assert shown in str(refused.value) or setting.name in ("LAKEHOUSE_METASTORE_DB",
                                                                   "LAKEHOUSE_CDC_DATABASE_URL"), refused.value
            assert "secret" not in str(refused.value), refused.value
            unset.delenv(setting.name)


def test_what_each_kind_reads(unset):
    for name, value in (("LAKEHOUSE_SQL_PASSWORD", " pass word "), ("LAKEHOUSE_LOG_LEVEL", "debug"),
                        ("LAKEHOUSE_SPARK_LOG_LEVEL", "error"), ("LAKEHOUSE_SPARK_UI", "true"),
                        ("LAKEHOUSE_LEASE_SECONDS", " 90 "), ("LAKEHOUSE_STOP_GRACE_SECONDS", "2.5"),
                        ("LAKEHOUSE_S3_ENDPOINT", "aws"), ("LAKEHOUSE_KAFKA_BOOTSTRAP", "a:1,b:2"),
                        ("LAKEHOUSE_JARS_DIR", "~/jars"), ("LAKEHOUSE_METASTORE_URI", "  ")):
        unset.setenv(name, value)
    loaded = load_settings()
    assert loaded.sql_password == " pass word "  # a password is taken as given
    assert (loaded.log_level, loaded.spark_log_level, loaded.spark_ui) == ("DEBUG", "ERROR", False)
    assert loaded.lease_seconds == 90.0 and isinstance(loaded.lease_seconds, float) and loaded.stop_grace_seconds == 2.5
    assert loaded.s3.endpoint == "" and loaded.kafka_bootstrap == "a:1,b:2" and loaded.kafka_bootstrap_set
    assert loaded.jars_dir == (Path.home() / "jars").resolve()
    assert loaded.metastore_uri == "thrift://127.0.0.1:9083" and not loaded.metastore_uri_set  # blank: unset
    unset.setenv("LAKEHOUSE_SPARK_UI", "1")
    assert load_settings().spark_ui


def test_the_reference_names_every_variable_and_every_field_filled_from_the_environment():
    reference = configuration_reference()
    lines = reference.splitlines()
    assert lines[0] == "| variable | type | default | minimum / choices | meaning |"
    assert len(lines) == 2 + len(SETTINGS)
    for setting, line in zip(SETTINGS, lines[2:], strict=True):
        assert line.startswith(f"| `{setting.name}` | "), line
        assert line.replace("\\|", "").count("|") == 6, line  # five cells: no stray `|` in a meaning
        assert not any("<" in prose for prose in line.split("`")[::2]), line  # `<repo>` not read as HTML
    assert len(ROWS) == len(SETTINGS)  # one row per variable
    assert {setting.fills for setting in SETTINGS} == filled_fields()  # every field read through one row
    assert all(variable in ROWS for variable in DERIVED.values())
    for needle in ("`1`: on, anything else: off", "at least 3", "1-65535", "`WARN`", "cores / 2, at least 1",
                   "`<repo>/lakehouse`", "whole number of seconds", "`<local>/_catalog`"):
        assert needle in reference, needle


def test_the_reference_keeps_a_meaning_in_its_cell(monkeypatch):
    """Markdown outside code spans made safe in a table cell: `|` escaped, `<...>` not taken for HTML."""
    from include.settings import Setting

    odd = Setting("LAKEHOUSE_ODD", "odd", Kind.WHOLE, "5", minimum=2, unit="files", shown_default="<n> files",
                  meaning="a|b under <local>, `x|<y>` as it is")
    monkeypatch.setattr(settings_module, "SETTINGS", (odd,))
    assert configuration_reference().splitlines()[2] == (
        "| `LAKEHOUSE_ODD` | whole number of files | &lt;n> files | at least 2 | a\\|b under &lt;local>, `x|<y>` as it is |")


def test_the_module_docstring_points_at_the_table_and_the_module_imports_nothing_heavy():
    assert "SETTINGS" in settings_module.__doc__ and "configuration_reference" in settings_module.__doc__
    assert "| LAKEHOUSE_" not in settings_module.__doc__  # no copy of the table of its own
    tree = ast.parse(Path(settings_module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    project = {name for name in imported if name.split(".")[0] in ("include", "spark_jobs", "dags")}
    # the storage layer, and the addresses the settings parse (include/addresses.py, which imports nothing of the project)
    assert all(name.startswith("include.storage.") or name == "include.addresses" for name in project), project
    assert not {name.split(".")[0] for name in imported} & {"pyspark", "airflow", "great_expectations", "delta",
                                                             "pandas", "pyarrow", "duckdb", "deltalake"}
