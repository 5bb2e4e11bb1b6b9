"""One way to read what a Delta table holds, whatever Delta feature its writer turned on: DuckDB's Delta extension
(delta-kernel-rs underneath), loaded from its PyPI package (`duckdb-extension-delta`; DuckDB's own installer would
download it at run time, which fails offline).

Why not delta-rs, which the operational tables are written with: `deltalake` 1.6 refuses a table with the
`typeWidening` reader feature, and its Arrow path cannot read a column-mapped table; Delta 4.4 turns both on for a
widened type and for a renamed or dropped column. The kernel reads type widening, column mapping (name and id),
deletion vectors and v2 checkpoints. Versions, transactions and commit metadata stay with delta-rs and the log
itself (include/storage/delta.py).

A connection per thread (DuckDB connections are not shared across threads; a forked child makes its own).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from importlib import import_module
from urllib.parse import unquote

import pyarrow as pa

from include.storage.delta_open import open_table

log = logging.getLogger(__name__)

DELTA, HTTPFS = "delta", "httpfs"  # httpfs, for a store on S3: DuckDB reads the data files with its own file system
TABLE_VIEW = "t"  # the name a `where` condition refers to the table by (as in include/storage/delta.py)

_local = threading.local()


class ReaderUnavailable(RuntimeError):
    """DuckDB or one of its extension packages is missing or does not match DuckDB's version."""


def extension_file(name: str) -> str:
    """The `.duckdb_extension` file the `duckdb-extension-<name>` package ships for the installed DuckDB."""
    import duckdb

    try:
        package = import_module(f"duckdb_extension_{name}")
    except ImportError as exc:
        raise ReaderUnavailable(f"the package duckdb-extension-{name} is not installed (requirements.txt)") from exc
    path = os.path.join(os.path.dirname(package.__file__), "extensions", f"v{duckdb.__version__}",
                        f"{name}.duckdb_extension")
    if not os.path.exists(path):
        raise ReaderUnavailable(f"duckdb-extension-{name} does not match DuckDB {duckdb.__version__} ({path} missing)")
    return path


def connection(s3=None):
    """This thread's DuckDB connection, with the extensions loaded, and its one S3 secret for the store `s3` (an
    include.storage.s3.S3Config) when given: replaced when another store is read (two secrets of one scope would
    leave DuckDB to pick one: a process that read a bucket on one server read the next server's through the first's
    endpoint, measured)."""
    import duckdb

    pid = os.getpid()
    if getattr(_local, "pid", None) != pid:  # a forked child must not use its parent's connection
        con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
        con.execute(f"LOAD '{extension_file(DELTA)}'")
        con.execute("SET TimeZone = 'UTC'")  # timestamps come back as UTC instants, as Delta stores them
        _local.connection, _local.pid, _local.s3 = con, pid, None
    con = _local.connection
    if s3 is not None and s3 != _local.s3:
        if _local.s3 is None:
            con.execute(f"LOAD '{extension_file(HTTPFS)}'")
        con.execute(_secret_statement(s3))
        _local.s3 = s3
    return con


def _secret_statement(s3) -> str:
    options = {"TYPE": "s3", "REGION": s3.region}
    if s3.endpoint:
        scheme, _, host = s3.endpoint.partition("://")
        options |= {"ENDPOINT": host.rstrip("/"), "URL_STYLE": "path", "USE_SSL": str(scheme == "https").lower()}
    if s3.access_key_id:
        options |= {"KEY_ID": s3.access_key_id, "SECRET": s3.secret_access_key}
    rendered = ", ".join(f"{key} {value if key == 'USE_SSL' else _literal(value)}" for key, value in options.items())
    return f"CREATE OR REPLACE SECRET lakehouse_s3 ({rendered})"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def scan(path, version: int | None = None, filename: bool = False) -> str:
    """The `delta_scan(...)` table function over `path` (a storage path), at `version` (default: the latest); with
    `filename`, each row's data file is in a column `filename`."""
    uri = _table_uri(path)
    at = f", version => {int(version)}" if version is not None else ""
    return f"delta_scan({_literal(uri)}{at}{', filename => true' if filename else ''})"


def query(path, sql: str, version: int | None = None, with_file: bool = False) -> pa.Table:
    """Run `sql` against the table at `path` (named `t` in it) at `version`; the result as Arrow. With `with_file`,
    `t` has a column `filename`: each row's data file, as DuckDB names it (see `file_name`)."""
    s3 = getattr(path, "config", None) if not getattr(path, "is_local", True) else None
    con = connection(s3)
    con.execute(f"CREATE OR REPLACE TEMP VIEW {TABLE_VIEW} AS {_table_select(con, path, version, with_file)}")
    try:
        return con.execute(sql).to_arrow_table()
    finally:
        con.execute(f"DROP VIEW IF EXISTS {TABLE_VIEW}")
        con.execute("DROP VIEW IF EXISTS lakehouse_partitions")


def _table_uri(path) -> str:
    uri = (path.uri if hasattr(path, "uri") else str(path)).rstrip("/")
    return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri  # the kernel's object store: s3://


def file_name(path, relative: str) -> str:
    """The `filename` DuckDB gives the rows of the table's data file `relative` (a log path, unquoted)."""
    return f"{_table_uri(path)}/{relative}"


def _table_select(con, path, version: int | None, with_file: bool) -> str:
    """SELECT of the table's rows. A column-mapped table's partition columns are taken from its log (through
    delta-rs, by file): the extension (1.5.5) reads them as NULL there, its files' partition values being keyed by
    physical column names."""
    table = open_table(path, version=version)
    partitions = table.metadata().partition_columns
    mapped = table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none"
    if not (partitions and mapped):
        return f"SELECT * FROM {scan(path, version, filename=with_file)}"
    actions = pa.table(table.get_add_actions(flatten=True))
    files = pa.table({"file": [file_name(path, unquote(p)) for p in actions["path"].to_pylist()],
                      **{c: actions[f"partition.{c}"] for c in partitions}})
    con.register("lakehouse_partitions", files)
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {scan(path, version)})")
                 .fetchall())
    columns = [f'CAST(p."{c}" AS {kind}) AS "{c}"' if c in partitions else f's."{c}"' for c, kind in types.items()]
    columns += ["s.filename"] if with_file else []
    return (f"SELECT {', '.join(columns)} FROM {scan(path, version, filename=True)} s "
            "JOIN lakehouse_partitions p ON s.filename = p.file")


def read_table(path, version: int | None = None, columns: Sequence[str] | None = None,
               where: str | None = None, files: Sequence[str] | None = None) -> pa.Table:
    """A version (default: the latest) of the table, optionally only some columns, the rows matching the SQL
    condition `where` (on table `t`), and only the rows of the data `files` (log paths, unquoted; each must be in
    that version)."""
    projection = ", ".join(f'"{c}"' for c in columns) if columns is not None else \
        ("* EXCLUDE (filename)" if files is not None else "*")
    conditions = [f"({where})"] if where else []
    if files is not None:
        conditions.append(f"filename IN ({', '.join(_literal(file_name(path, f)) for f in files) or 'NULL'})")
    sql = f"SELECT {projection} FROM {TABLE_VIEW}" + (f" WHERE {' AND '.join(conditions)}" if conditions else "")
    return query(path, sql, version, with_file=files is not None)


def read_files(path, added: dict[int, Sequence[str]], columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of data files that commits added (version -> its files), each read at its commit's version (a later
    compaction may have replaced it since), under the table's latest schema: a column renamed since is read under its
    new name (matched by its physical name), one dropped since is left out, a widened one has its wider type."""
    wanted = list(columns) if columns is not None else list(_physical_names(open_table(path)))
    parts = []
    for version, files in added.items():
        then = names_now(path, version)
        read = read_table(path, version=version, files=files,
                          columns=[name for name, now in then.items() if now in wanted])
        parts.append(read.rename_columns([then[name] for name in read.column_names]).select(wanted))
    if not parts:
        return read_table(path, columns=wanted, files=[])
    return pa.concat_tables(parts, promote_options="permissive")  # a type widened between them: the wider one


def names_now(path, version: int) -> dict[str, str | None]:
    """Each column of the table at `version` -> its name in the latest version (None: dropped since), matched by
    physical name (column mapping; without it, by name)."""
    latest = {physical: name for name, physical in _physical_names(open_table(path)).items()}
    return {name: latest.get(physical) for name, physical in
            _physical_names(open_table(path, version=version)).items()}


def _physical_names(table) -> dict[str, str]:
    """Each column's name -> its physical name (the name itself without column mapping)."""
    return {f.name: f.metadata.get("delta.columnMapping.physicalName", f.name) for f in table.schema().fields}


def count_rows(path, where: str | None = None) -> int:
    """Rows of the table's latest version (those matching the SQL condition `where`)."""
    counted = query(path, f"SELECT count(*) AS n FROM {TABLE_VIEW}" + (f" WHERE {where}" if where else ""))
    return int(counted["n"][0].as_py())
