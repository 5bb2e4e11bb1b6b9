"""What a change of a job's output schema or transform needs of its checkpoint (include/checkpoints/plan.py compares
the fingerprints): `evolve` when the next start can change the sink table in place and resume, else a rebuild."""

from __future__ import annotations

import re
from typing import Any

from include.registry import Deduplicate, JobSpec, ParseJson, delta_widens

# their state (none; the dedup keys; an apply_changes job's tables) holds no other column
PASS_THROUGH_KINDS = (ParseJson.kind, Deduplicate.kind, "apply_changes")
TRANSFORM_REBUILT = "keys, windows, gap, join or aggregations shape the state and the rows"


# Readers of a table whose type was widened in place: its protocol rises (reader 3, writer 7, feature typeWidening)
WIDENING_READERS = ("the table's protocol rises to Delta's typeWidening feature: Spark with Delta 4.0 or later and "
                    "the product's reader read it; delta-rs (the `deltalake` package, 1.6) and older Delta clients "
                    "can no longer read it")
# Readers of a table whose columns were renamed or dropped in place: column mapping (name mode), reader 2, writer 5+
MAPPING_READERS = ("column mapping (name mode) is enabled on the table: its protocol rises to Delta's columnMapping "
                   "feature; Spark with Delta 1.2 or later and the product's reader read it; delta-rs (the `deltalake` "
                   "package, 1.6) reads it through its DataFusion engine but not its Arrow reader (`to_pyarrow_table`), "
                   "and a streaming reader needs a schema tracking location (the product's jobs set theirs)")


def schema_change(job: JobSpec, before: dict[str, str] | None, after: dict[str, str]) -> tuple[str, str]:
    """The mode (and why) of a change of the job's output schema from `before` (the checkpoint's) to `after`."""
    if not isinstance(before, dict):
        return "full-refresh", "the checkpoint records no output schema to compare with"
    renamed = {new: old for new, old in job.renamed_columns.items() if old in before and new not in before}
    dropped = [c for c in before if c not in after and c not in renamed.values()]
    added = [c for c in after if c not in before and c not in renamed]
    was = {**before, **{new: before[old] for new, old in renamed.items()}}  # the types before, by today's names
    retyped = [c for c in after if c in was and c not in added and was[c] != after[c]]
    described = "; ".join(f"{c} {was[c]} -> {after[c]}" for c in retyped)
    pass_through = job.transform.kind in PASS_THROUGH_KINDS
    keys = set(getattr(job.transform, "keys", ()))
    changed = ", ".join([*(f"{old} renamed to {new}" for new, old in renamed.items()),
                         *(f"column {c} dropped" for c in dropped)])
    if changed and not pass_through:
        return "full-refresh", (f"{changed}: a {job.transform.kind} job's state and rows are shaped by its output "
                                "columns: this job is rebuilt, not the jobs it reads")
    if keyed := [c for c in renamed if c in keys]:
        return "full-refresh", f"{changed}: the job's state is keyed on {', '.join(keyed)}"
    if retyped:
        reason = f"column type changed ({described}): the rows written hold the old type"
        narrowing = [c for c in retyped if not delta_widens(was[c], after[c])]
        if narrowing:
            return "full-refresh", reason + f"; {', '.join(narrowing)}: not a change Delta's type widening makes in place"
        if not pass_through:
            return "full-refresh", reason + (f"; Delta widens it in place, but a {job.transform.kind} job's state "
                                             "holds its output columns")
        if keyed := [c for c in retyped if c in keys]:
            return "full-refresh", reason + f"; Delta widens it in place, but the job's state is keyed on {', '.join(keyed)}"
    if added and not pass_through:
        return "full-refresh", (f"a {job.transform.kind} job's state and rows are shaped by its output columns "
                                f"({', '.join(added)} added)")
    done = [f"nullable column {', '.join(added)} added (rows written before read null)"] if added else []
    if retyped:
        done.append(f"{described} widened in place (Delta's type widening: no file rewritten; {WIDENING_READERS})")
    if renamed:
        done.append(f"{', '.join(f'{old} renamed to {new}' for new, old in renamed.items())} in place (the rows "
                    "written before read under the new name)")
    if dropped:
        hint = (f"; renamed to {', '.join(added)}? declare `{added[0]}: {{type: {after[added[0]]}, renamed_from: "
                f"{dropped[0]}}}` to keep its values" if added else "")
        done.append(f"column {', '.join(dropped)} dropped in place (its files keep the values, no reader sees them"
                    f"{hint})")
    if renamed or dropped:
        done.append(MAPPING_READERS)
    return "evolve", (f"{'; '.join(done)}: the next start changes the sink table and resumes the checkpoint; "
                      "nothing is read again")


def transform_change(job: JobSpec, before: Any, after: Any) -> tuple[str, str]:
    """The mode (and why) of a change of the job's transform: a column its inputs renamed, referred to by its new
    name and not a key, is `evolve` (the state holds no column name); anything else rebuilds the state."""
    if job.transform.kind == "apply_changes" and isinstance(before, dict) and isinstance(after, dict):
        added = _columns_added(before, after)
        if added:
            return "evolve", (f"copies {', '.join(added)} too (added to the database table): the tables gain the "
                              "column, its rows written before read null until their next change; nothing is read again")
    renames = job.input_renames
    if renames and isinstance(before, dict) and _renamed(before, renames) == after:
        keys = [k for k in (*before.get("keys", ()), *(c for pair in before.get("join_keys", ()) for c in pair))
                if k in renames]
        if not keys:
            used = ", ".join(f"{old} as {new}" for old, new in renames.items() if _renamed(before, {old: new}) != before)
            return "evolve", (f"reads {used} (renamed upstream): the state holds no column name; the next start "
                              "resumes the checkpoint, nothing is read again")
        return "full-refresh", f"its state is keyed on {', '.join(keys)}, renamed to {', '.join(renames[k] for k in keys)}"
    return "full-refresh", TRANSFORM_REBUILT


def _columns_added(before: dict, after: dict) -> list[str]:
    """The data columns an apply_changes transform copies now and did not before, when that is all that changed (its
    keys, order, SCD type and deletes the same; tracked columns only gaining the added ones)."""
    was, now = list(before.get("columns", ())), list(after.get("columns", ()))
    added = [c for c in now if c not in was]
    same = {k: v for k, v in after.items() if k not in ("columns", "tracked")} == {
        k: v for k, v in before.items() if k not in ("columns", "tracked")}
    tracked_before, tracked_after = before.get("tracked", []), after.get("tracked", [])
    if not added or not same or [c for c in now if c in was] != was:
        return []
    if [c for c in tracked_after if c not in added] != list(tracked_before):
        return []
    return added


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    """`value` (a fingerprint's transform) with each column name in `renames` replaced, also inside SQL expressions."""
    if isinstance(value, dict):
        return {k: _renamed(v, renames) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, renames) for v in value]
    if isinstance(value, str):
        if value in renames:
            return renames[value]
        for old, new in renames.items():
            value = re.sub(rf"(?<![\w.'\"`]){re.escape(old)}(?![\w'\"`])", new, value)
    return value
