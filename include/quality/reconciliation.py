"""Reconciling a windowed or session gold table's counts with its source (silver) events.

What the streaming job guarantees (see tests/oracle.py for the watermark semantics): a micro-batch
drops a (row, window) pair as late when window_end <= the previous batch's eviction watermark, and
that watermark is max(event time of the batches before it) - delay. So an event that silver
committed in version ``v`` can only have been dropped by the gold job if its window ended at or
before ``max(event_time of silver versions < v) - delay``: the job's watermark cannot have moved past
events it had not read yet. Such (event, window) pairs are *late-arrival candidates*. For session
windows, an event's own window is [event time, event time + gap): it is a candidate when
``event time + gap <= max(event_time of silver versions < v) - delay``.

- Backfill runs (silver finished before gold starts, as in ``lakehouse_backfill``): the gold job's
  late watermark never exceeds the one silver filtered the same events with, so gold equals silver
  exactly (observed in real runs: 5,642 events in 68 windows, no difference).
- Live runs (silver and gold running concurrently): gold can catch up with silver, run a no-data
  batch and advance its watermark past events silver accepts one batch later; those are dropped
  as late (observed: 154 of 3,683 events in a run where gold triggered every second and silver every
  8 seconds, all within the candidates). The job's ``numRowsDroppedByWatermark`` cannot be used for
  the bound: it counts partially aggregated rows, not events (138 there).

Windows (:func:`reconcile_windows`), per finalized window (window_end <= the gold job's latest
committed watermark): ``source - candidates <= gold <= source``, with source = distinct silver events
(by event_id) in the window. Gold above source is never legitimate. Exact in backfill mode, bounded
in live mode.

Sessions (:func:`reconcile_sessions`): the distinct silver events of each key are sessionized in
batch (the session ends ``gap`` after its last event, and an event at or before that end joins it,
as Spark merges session windows). A dropped late event can split a session in gold, so
per finalized batch session (end <= the watermark) the gold side is the sum of the counts of the
gold sessions of that key *contained* in it, and ``source - candidates <= gold <= source`` as for
windows. A gold session contained in no batch session of its key has no source events: it is
unreconciled (excess). Gold sessions inside batch sessions that are not finalized yet are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from include.quality.suites import SessionTable, WindowedTable
from include.quality.timestamps import MICROS, epoch_micros, iso
from include.storage import delta as delta_store
from include.storage import reader
from include.storage.paths import StoragePath

log = logging.getLogger(__name__)

UNKNOWN_VERSION = np.iinfo(np.int64).max  # files whose commit is no longer in the log
NO_EVENTS = np.iinfo(np.int64).min // 2  # "max event time" of no versions; subtracting a delay must not wrap


@dataclass
class SourceEvents:
    """Distinct source events: event time (epoch µs) and the source version that first committed them."""

    times: np.ndarray
    versions: np.ndarray
    prefix_max: np.ndarray  # per event: max event time of the source versions before its own
    unversioned_rows: int  # rows in files whose commit entry is gone (treated as possibly late)
    keys: pd.DataFrame  # per event: the requested key columns (as read; nulls kept)

    @property
    def latest(self) -> int | None:
        return int(self.times.max()) if len(self.times) else None

    @property
    def earliest(self) -> int | None:
        return int(self.times.min()) if len(self.times) else None


def _file_versions(path: StoragePath) -> dict[str, int]:
    """Each data file's adding version, from the JSON commits still in the log."""
    versions: dict[str, int] = {}
    for version in range(delta_store.latest_version(path) + 1):
        try:
            adds = delta_store.commit_files(path, version)
        except (FileNotFoundError, ValueError):  # cleaned-up log entry, or a commit that rewrote files
            continue
        for add in adds:
            versions.setdefault(unquote(add["path"]), version)
    return versions


def read_source_events(path: StoragePath, event_time: str, keys: tuple[str, ...] = ()) -> SourceEvents:
    """The source table's distinct events (by event_id, first commit wins) with their commit versions
    and their `keys` columns."""
    empty = SourceEvents(np.array([], np.int64), np.array([], np.int64), np.array([], np.int64), 0,
                         pd.DataFrame({k: pd.Series([], dtype=object) for k in keys}))
    if not delta_store.table_exists(path):
        return empty
    known = {reader.file_name(path, relative): version for relative, version in _file_versions(path).items()}
    columns = ", ".join(f'"{c}"' for c in ("event_id", event_time, *keys))
    read = reader.query(path, f"SELECT {columns}, filename FROM t", with_file=True)
    if read.num_rows == 0:
        return empty
    versions = np.array([known.get(f, UNKNOWN_VERSION) for f in read["filename"].to_pylist()], dtype=np.int64)
    frame = pd.DataFrame({"event_id": pc.cast(read["event_id"], pa.string()).to_numpy(zero_copy_only=False),
                          "t": epoch_micros(read[event_time]), "v": versions})
    for key in keys:
        frame[f"key:{key}"] = read[key].to_numpy(zero_copy_only=False)
    unversioned = int((frame["v"] == UNKNOWN_VERSION).sum())
    # max event time of all versions strictly before each version (unknown versions: everything before)
    per_version = frame.groupby("v")["t"].max().sort_index()
    before = per_version.cummax().shift(1, fill_value=NO_EVENTS)
    frame = frame.sort_values(["v", "t"], kind="stable").drop_duplicates("event_id")
    return SourceEvents(frame["t"].to_numpy(), frame["v"].to_numpy(), frame["v"].map(before).to_numpy(np.int64),
                        unversioned, pd.DataFrame({k: frame[f"key:{k}"].to_numpy() for k in keys}))


def _outcome(noun: str, units: pd.DataFrame, describe: Callable[[Any], dict[str, Any]], source: SourceEvents,
             excess: pd.DataFrame | None = None,
             describe_excess: Callable[[Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The observed values of a reconciliation: `units` (finalized windows or sessions) have columns
    gold, source and candidates; `excess` (column gold) holds the gold units within no source unit."""
    excess = pd.DataFrame({"gold": []}) if excess is None else excess
    bad = units[(units["gold"] > units["source"]) | (units["gold"] < units["source"] - units["candidates"])]
    sample = [{**describe(label), "gold": int(r.gold), "source": int(r.source),
               "late_arrival_candidates": int(r.candidates)} for label, r in bad.head(5).iterrows()]
    sample += [{**describe_excess(label), "gold": int(r.gold), "source": 0, "late_arrival_candidates": 0}
               for label, r in excess.head(5 - len(sample)).iterrows()] if describe_excess else []
    return {
        f"unreconciled_{noun}s": len(bad) + len(excess),
        f"finalized_{noun}s": len(units),
        "gold_events": int(units["gold"].sum()),
        "source_events": int(units["source"].sum()),
        "shortfall_events": int((units["source"] - units["gold"]).clip(lower=0).sum()),
        "excess_events": int((units["gold"] - units["source"]).clip(lower=0).sum() + excess["gold"].sum()),
        "late_arrival_candidates": int(units["candidates"].sum()),
        "unversioned_source_rows": source.unversioned_rows,
        "unreconciled_sample": sample,
        **({f"excess_gold_{noun}s": len(excess)} if noun != "window" else {}),
    }


def reconcile_windows(gold: pa.Table, spec: WindowedTable, source: SourceEvents, watermark_us: int) -> dict:
    """Compare gold counts with source events per finalized window (all keys together)."""
    window, slide, delay = spec.window_seconds * MICROS, spec.slide_seconds * MICROS, spec.watermark_seconds * MICROS
    count = spec.counts[0]
    # source side: every (event, window) pair, and whether the gold job may have dropped it as late
    offset = spec.offset_seconds * MICROS
    base = source.times - (source.times - offset) % slide
    starts = np.concatenate([base - j * slide for j in range(spec.windows_per_event)])
    late_ok = np.concatenate([base - j * slide + window <= source.prefix_max - delay
                              for j in range(spec.windows_per_event)])
    src = pd.DataFrame({"start": starts, "candidates": late_ok}).groupby("start")["candidates"].agg(["size", "sum"])
    src.columns = ["source", "candidates"]
    # gold side: one count per (window, keys) -- duplicates are unique_windows' business
    keys = list(spec.unique_key)
    cells = gold.select([*keys, count]).group_by(keys).aggregate([(count, "max")])
    per_window = pd.Series(cells[f"{count}_max"].to_numpy(zero_copy_only=False),
                           index=epoch_micros(cells["window_start"])).groupby(level=0).sum().rename("gold")
    both = src.join(per_window, how="outer").fillna(0).astype(np.int64)
    both = both[both.index + window <= watermark_us]
    return _outcome("window", both, lambda start: {"window_start": iso(start)}, source)


@dataclass
class SessionMatch:
    """The source events sessionized per key in batch, and the gold sessions matched with them.

    ``sessions``: per batch session: code (the key), start, end (last event + gap), source (events),
    candidates (late-arrival candidates), first (index of its first event in the source), gold (sum of
    the counts of the gold sessions inside it) and gold_sessions (how many). ``golds``: per distinct
    gold session: code, start, end (µs; NaN when null), gold (count) and inside (within a batch session).
    """

    sessions: pd.DataFrame
    golds: pd.DataFrame
    gold_keys: pd.DataFrame

    def earliest_missing_end(self, after: int | None, closed_by: int) -> int | None:
        """The end of the earliest-ending batch session after `after`, closed (ended) by `closed_by`, that
        has no gold session inside it, leaving out those made of late-arrival candidates only (the job
        may have dropped them)."""
        missing = self.sessions[(self.sessions["gold_sessions"] == 0) & (self.sessions["end"] <= closed_by)
                                & (self.sessions["source"] > self.sessions["candidates"])]
        if after is not None:
            missing = missing[missing["end"] > after]
        return int(missing["end"].min()) if len(missing) else None


def match_sessions(gold: pa.Table, spec: SessionTable, source: SourceEvents) -> SessionMatch:
    """Sessionize the source events per key and find, for each gold session, the batch session of its
    key that contains it (a dropped late event can split a session in gold)."""
    gap, delay, keys = spec.gap_seconds * MICROS, spec.watermark_seconds * MICROS, list(spec.keys)
    count = spec.counts[0] if spec.counts else None
    # gold side: one row per (session, keys) -- duplicates are unique_windows' business
    cells = (gold.select([*spec.unique_key, count]).group_by(list(spec.unique_key)).aggregate([(count, "max")])
             if count else gold.select(list(spec.unique_key)).group_by(list(spec.unique_key)).aggregate([]))
    gold_keys = pd.DataFrame({k: cells[k].to_numpy(zero_copy_only=False) for k in keys})
    # one integer code per key value (nulls are a key value too), shared by both sides
    codes = (pd.concat([source.keys[keys], gold_keys], ignore_index=True)
             .groupby(keys, dropna=False, sort=False).ngroup().to_numpy(np.int64))
    src_codes, gold_codes = codes[: len(source.times)], codes[len(source.times):]

    # source side: batch sessions per key (an event joins the session when it comes at most a gap after the
    # previous one: at or before the session's end, as Spark merges session windows; see tests/oracle.py)
    order = np.lexsort((source.times, src_codes))
    code, t = src_codes[order], source.times[order]
    new = np.ones(len(t), bool)
    new[1:] = (code[1:] != code[:-1]) | (t[1:] > t[:-1] + gap)
    events = pd.DataFrame({"session": np.cumsum(new) - 1, "code": code, "t": t, "first": order,
                           "candidates": (source.times + gap <= source.prefix_max - delay)[order]})
    sessions = events.groupby("session").agg(code=("code", "first"), start=("t", "min"), last=("t", "max"),
                                             source=("t", "size"), candidates=("candidates", "sum"),
                                             first=("first", "first"))
    sessions["end"] = sessions["last"] + gap

    # gold sessions, each matched with the batch session of its key that starts at or before it
    counts = cells[f"{count}_max"].to_numpy(zero_copy_only=False) if count else np.zeros(len(cells))
    golds = pd.DataFrame({"code": gold_codes, "start": epoch_micros(cells[spec.start]),
                          "end": epoch_micros(cells[spec.end]), "gold": counts, "row": np.arange(len(cells))})
    golds["gold"] = golds["gold"].fillna(0)
    bounded = golds.dropna(subset=["start", "end"]).astype({"start": np.int64, "end": np.int64})
    matched = pd.merge_asof(
        bounded.sort_values("start"),
        sessions.reset_index()[["session", "code", "start", "end"]].rename(columns={"start": "b_start", "end": "b_end"})
        .sort_values("b_start"),
        left_on="start", right_on="b_start", by="code", direction="backward")
    matched = matched[matched["session"].notna() & (matched["end"] <= matched["b_end"])]
    per_session = matched.groupby("session")["gold"].agg(["sum", "size"])
    sessions["gold"] = per_session["sum"].reindex(sessions.index, fill_value=0).astype(np.int64)
    sessions["gold_sessions"] = per_session["size"].reindex(sessions.index, fill_value=0)
    golds["inside"] = golds["row"].isin(matched["row"])
    return SessionMatch(sessions, golds, gold_keys)


def reconcile_sessions(match: SessionMatch, spec: SessionTable, source: SourceEvents, watermark_us: int) -> dict:
    """Compare each finalized batch session with the gold sessions of its key contained in it."""
    sessions, golds, keys = match.sessions, match.golds, list(spec.keys)
    finalized = sessions[sessions["end"] <= watermark_us]
    # finalized gold sessions (or with a null bound) inside no batch session of their key: no source events
    outside = golds[~golds["inside"] & ~(golds["end"] > watermark_us)]

    def describe_source(session: int) -> dict[str, Any]:
        row = sessions.loc[session]
        return {**{k: _plain(source.keys[k].iloc[int(row["first"])]) for k in keys},
                "session_start": iso(row["start"]), "session_end": iso(row["end"])}

    def describe_gold(row: int) -> dict[str, Any]:
        start, end = golds.at[row, "start"], golds.at[row, "end"]
        return {**{k: _plain(match.gold_keys[k].iloc[row]) for k in keys},
                "session_start": None if np.isnan(start) else iso(start),
                "session_end": None if np.isnan(end) else iso(end), "in_no_source_session": True}

    return _outcome("session", finalized, describe_source, source, outside, describe_gold)


def _plain(value: Any) -> Any:
    """A JSON-friendly scalar (numpy scalars and NaN keys become Python values / None)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value
