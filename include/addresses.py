"""The addresses the settings name, each parsed in one place, its error naming the variable it came from: a Kafka
bootstrap list, a metastore's `thrift://` URI, a PostgreSQL database's `postgresql://` URL (and its DSN without the
password, for display), an HTTP server's `http://host:port`. It imports nothing of the project."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit


def check_bootstrap(name: str, value: str) -> None:
    """Raise ValueError naming `name` unless `value` is a comma-separated list of `host:port`."""
    for server in value.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name} must be host:port (comma-separated for several brokers), got {value!r}")


def metastore_host_port(uri: str) -> tuple[str, int]:
    """(host, port) of a `thrift://host:port` URI; ValueError naming LAKEHOUSE_METASTORE_URI otherwise."""
    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "thrift" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(f"LAKEHOUSE_METASTORE_URI must be thrift://host:port, got {uri!r}")
    return parts.hostname, port


def http_host_port(name: str, url: str) -> tuple[str, int]:
    """(host, port) of an `http://host:port` URL (a trailing slash allowed); ValueError naming `name` otherwise."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/") or parts.query:
        raise ValueError(f"{name} must be http://host:port, got {url!r}")
    return parts.hostname, port


@dataclass(frozen=True)
class PostgresAddress:
    """A PostgreSQL database: where the catalog keeps its tables (LAKEHOUSE_METASTORE_DB), the database whose changes
    are captured (LAKEHOUSE_CDC_DATABASE_URL)."""

    host: str
    port: int
    database: str
    user: str
    password: str

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def shown(self) -> str:
        """The DSN without its password: what may be printed and logged."""
        return f"postgresql://{quote(self.user, safe='')}@{self.host}:{self.port}/{self.database}"

    @property
    def url(self) -> str:
        """The DSN with its password (`postgresql://user:password@host:port/database`)."""
        return (f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{self.host}:{self.port}/"
                f"{self.database}")


def postgres_address(url: str, variable: str = "LAKEHOUSE_METASTORE_DB") -> PostgresAddress:
    """The parts of `postgresql://user:password@host:port/database` (port 5432 when left out); ValueError naming
    `variable`, without the password, otherwise."""
    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 0
    database = parts.path.lstrip("/")
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not port or not database \
            or "/" in database or not parts.username:
        raise ValueError(f"{variable} must be postgresql://user:password@host:port/database, got "
                         f"{parts.scheme}://...{'/' + database if database else ''}")
    return PostgresAddress(parts.hostname, port, database, unquote(parts.username), unquote(parts.password or ""))


def s3_endpoint(text: str) -> str:
    """LAKEHOUSE_S3_ENDPOINT: an http(s) URL (its trailing slashes dropped), or `aws`: AWS S3 itself (no endpoint)."""
    endpoint = text.rstrip("/")
    if endpoint != "aws" and not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"LAKEHOUSE_S3_ENDPOINT must be an http:// or https:// URL, or `aws`, got {endpoint!r}")
    return "" if endpoint == "aws" else endpoint


LINEAGE_TRANSPORTS = ("kafka", "file", "off")  # or an http(s):// URL


def lineage_destination(text: str) -> str:
    """LAKEHOUSE_LINEAGE: `kafka`, `file`, `off`, or an http(s):// URL (trailing slashes dropped)."""
    if text in LINEAGE_TRANSPORTS:
        return text
    if text.startswith(("http://", "https://")) and len(text.split("://", 1)[1]) > 0:
        return text.rstrip("/")
    raise ValueError(f"LAKEHOUSE_LINEAGE must be {', '.join(LINEAGE_TRANSPORTS)} or an http(s):// URL (an "
                     f"OpenLineage endpoint: Marquez, DataHub), got {text!r}")
