"""Airflow Assets of the lakehouse's Delta tables."""

from __future__ import annotations

from airflow.sdk import Asset

from include.settings import Settings


def table_asset(settings: Settings, table: str) -> Asset:
    """The Airflow Asset of a lakehouse Delta table (name = the registry table name)."""
    return Asset(name=table, uri=settings.layout.table(table).as_uri(), group="delta")
