"""Table metrics of the SCD tables (``apply_changes`` sinks), over pandas frames of their versions.

- ``keys_with_several_current_versions``: keys with more than one current version (``__end_at`` null).
- ``overlapping_versions``: per key, in ``__start_at`` order (then ``_cdc_sequence``), the versions that start before
  the previous one's ``__end_at``, or that are closed and follow a current one. Two current versions of a key are
  ``one_current_version``'s finding, a repeated version (key, ``_cdc_sequence``) the uniqueness check's: both are
  counted among distinct versions.
- The latest change a table holds: the latest of its commit-time columns (a type 1 table's deletes table too, which
  keeps the changes that removed a row).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from include.quality.suites import HistoryTable, ScdTable
from include.quality.suites.scd import COMMIT_TIME
from include.quality.timestamps import micros
from include.registry.cdc import END_AT, SEQUENCE, START_AT
from include.settings import Settings
from include.storage import delta as delta_store

EXAMPLES = 5


def _examples(spec: ScdTable, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Some versions as the details show them: their keys, first change and span."""
    rows = frame[[*spec.keys, SEQUENCE, START_AT, END_AT]].head(EXAMPLES).to_dict("records")
    return [{**r, **{c: None if pd.isna(r[c]) else r[c].isoformat() for c in (START_AT, END_AT)}} for r in rows]


def several_current(spec: HistoryTable, versions: pd.DataFrame) -> dict[str, Any]:
    """Keys with more than one current version among the distinct `versions`."""
    current = versions[versions[END_AT].isna()]
    per_key = current.groupby(list(spec.keys), dropna=False).size()
    several = per_key[per_key > 1]
    found = current.merge(several.rename("_n").reset_index(), on=list(spec.keys)) if len(several) else current[:0]
    return {"keys_with_several_current_versions": len(several), "current_versions": len(current),
            "keys": versions[list(spec.keys)].drop_duplicates().shape[0], "examples": _examples(spec, found)}


def overlapping_versions(spec: HistoryTable, versions: pd.DataFrame) -> dict[str, Any]:
    """The distinct `versions` that overlap the previous version of their key (module docstring)."""
    keys = list(spec.keys)
    ordered = versions.dropna(subset=[START_AT]).sort_values([*keys, START_AT, SEQUENCE])
    by_key = ordered.groupby(keys, dropna=False)
    has_previous = by_key.cumcount() > 0
    previous_end = by_key[END_AT].shift()
    after_current = has_previous & previous_end.isna() & ordered[END_AT].notna()
    before_end = has_previous & previous_end.notna() & (ordered[START_AT] < previous_end)
    found = ordered[after_current | before_end]
    return {"overlapping_versions": len(found), "versions": len(ordered), "examples": _examples(spec, found)}


def latest_held(settings: Settings, spec: ScdTable, rows: pa.Table) -> int | None:
    """The latest change commit time (epoch µs) the table holds (`rows`: its commit-time columns), its deletes
    table's included; None when neither holds one."""
    times = [rows[c] for c in spec.held_times]
    if spec.deletes_table and delta_store.table_exists(settings.layout.table(spec.deletes_table)):
        times.append(delta_store.read_table(settings.layout.table(spec.deletes_table), columns=[COMMIT_TIME])[COMMIT_TIME])
    return max((t for t in (pc.max(micros(c)).as_py() for c in times) if t is not None), default=None)
