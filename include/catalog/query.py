"""`lakehouse query "SQL" [--format table|csv|json]`: one statement over the catalog, read-only, for scripts and the
docs' examples (docs/operations/catalog-sql.md). Through the SQL endpoint when it answers (beeline, the JDBC client
pyspark ships: what any JDBC client sees), else in a local Spark session on the catalog with the same read-only
rule."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from include.catalog import sql_endpoint
from include.daemons import spark_home
from include.settings import Settings
from include.spark_session import get_spark

FORMATS = ("table", "csv", "json")
PROMPT = re.compile(r"\d+: jdbc:hive2://\S+> ")  # beeline's prompt, which it writes even when silent


class QueryError(RuntimeError):
    """The statement failed or was refused; the message is one line saying why."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[list]
    via: str  # where it ran: the endpoint's JDBC URL, or the catalog's URI of a local session


def run_query(settings: Settings, statement: str) -> QueryResult:
    statement = statement.strip().rstrip(";").strip()
    if not statement:
        raise QueryError("no statement given")
    if sql_endpoint.answers(settings):
        return through_endpoint(settings, statement)
    return in_local_session(settings, statement)


def through_endpoint(settings: Settings, statement: str) -> QueryResult:
    """The statement through beeline (JDBC), its password in a file readable by this user only."""
    url = sql_endpoint.jdbc_url(settings)
    with tempfile.TemporaryDirectory(prefix="lakehouse-query-") as directory:
        password_file = os.path.join(directory, "password")
        descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(sql_endpoint.password(settings))
        command = [str(spark_home() / "bin" / "beeline"), "-u", url, "-n", settings.sql_user, "-w", password_file,
                   "--silent=true", "--outputformat=csv2", "-e", statement]
        result = subprocess.run(command, env={**os.environ, "SPARK_HOME": str(spark_home())}, capture_output=True,
                                text=True, timeout=900)
    if result.returncode != 0:
        raise QueryError(endpoint_error(result.stderr) or f"beeline exited with {result.returncode}")
    lines = [line for line in PROMPT.sub("", result.stdout).splitlines() if line.strip()]
    parsed = list(csv.reader(lines))
    return QueryResult(parsed[0] if parsed else [], parsed[1:], url)


def endpoint_error(stderr: str) -> str:
    """The one line that says why: the innermost cause beeline printed (the read-only rule's, a wrong login's)."""
    causes = [line.split("Caused by: ", 1)[1] for line in stderr.splitlines() if line.startswith("Caused by: ")]
    errors = [line.removeprefix("Error: ") for line in stderr.splitlines() if line.startswith("Error: ")]
    line = (causes or errors or [""])[0]
    return re.sub(r"^[\w.$]+(Exception|Error): ", "", line).strip()


def in_local_session(settings: Settings, statement: str) -> QueryResult:
    """The statement in this process's Spark session on the catalog, read-only."""
    from include.catalog_client.tables import on_catalog

    spark = get_spark(settings, app_name="lakehouse-query", read_only=True)
    if not on_catalog(spark):
        raise QueryError(f"no catalog answers at {settings.metastore_uri}: start it (lakehouse catalog up)")
    try:
        frame = spark.sql(statement)
        rows = [list(row) for row in frame.collect()]
    except Exception as exc:  # noqa: BLE001 - Spark's errors (py4j, analysis) become one line
        java = getattr(exc, "java_exception", None)  # the JVM's own message (the read-only rule's), not py4j's
        message = str(java.getMessage() if java is not None else exc).strip() or type(exc).__name__
        raise QueryError(re.sub(r"^[\w.$]+(Exception|Error): ", "", message.splitlines()[0])) from None
    return QueryResult(list(frame.columns), rows, f"a local session on the catalog at {settings.metastore_uri}")


def render(result: QueryResult, output: str) -> str:
    """The rows as an aligned table, CSV (with a header) or a JSON array of objects."""
    if output == "json":
        return json.dumps([dict(zip(result.columns, row, strict=True)) for row in result.rows], default=str)
    if output == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([["" if v is None else v for v in row] for row in result.rows])
        return buffer.getvalue().rstrip("\n")
    cells = [result.columns, *[["NULL" if v is None else str(v) for v in row] for row in result.rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(result.columns))]
    lines = [" | ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join([*lines, f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})"])
