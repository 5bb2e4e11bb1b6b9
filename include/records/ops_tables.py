"""Rows appended to an operational table, `_ops/<name>` under the root: what every writer of one shares."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from include.settings import Settings
from include.storage import delta as delta_store


def append(settings: Settings, table: str, schema: Mapping[str, str], rows: Sequence[Mapping]) -> None:
    """Append `rows` to `_ops/<table>` in one Delta commit (the table made with `schema` if needed); no commit when
    there are none."""
    if rows:
        delta_store.append_rows(settings.layout.ops_table(table), schema, rows)
