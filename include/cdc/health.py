"""The change data capture's health, as `lakehouse health` and the pipeline-health report show it: per connector of the
registry, whether it runs (the worker answers, the connector and its task RUNNING) and its replication slot's state,
with a problem named for a connector that is down, a task that failed, a slot that no connector reads (inactive: it
holds the database's WAL without bound) and a slot whose lag grows.

A slot's lag "grows" when its last :data:`GROWTH_READINGS` readings (each `lakehouse health`, each health report:
kept in `<local>/_cdc/slot_lag.json`) rise one after the other, span at least :data:`GROWTH_SECONDS`, and the last
is above :data:`GROWTH_MIN_BYTES`: a reader that falls further behind, not the few kilobytes a busy slot holds
between two confirmations."""

from __future__ import annotations

import json
import time

from include.cdc import chain
from include.registry import Registry
from include.settings import Settings

GROWTH_READINGS = 3
GROWTH_SECONDS = 60.0
GROWTH_MIN_BYTES = 1024**2
KEPT_READINGS = 12


def _readings(settings: Settings, info: dict) -> dict[str, list[list[float]]]:
    """Each slot's lag readings ([time, bytes], oldest first) with this one added, kept in slot_lag.json."""
    path = settings.layout.cdc / "slot_lag.json"
    try:
        kept = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        kept = {}
    now = time.time()
    for each in info["connectors"].values():
        if each["slot_lag_bytes"] is not None:
            kept[each["slot"]] = [*kept.get(each["slot"], []), [now, each["slot_lag_bytes"]]][-KEPT_READINGS:]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".slot_lag.json.tmp")
    tmp.write_text(json.dumps(kept))
    tmp.replace(path)
    return kept


def lag_grows(readings: list[list[float]]) -> bool:
    last = readings[-GROWTH_READINGS:]
    return (len(last) == GROWTH_READINGS and all(a[1] < b[1] for a, b in zip(last, last[1:], strict=False))
            and last[-1][0] - last[0][0] >= GROWTH_SECONDS and last[-1][1] > GROWTH_MIN_BYTES)


def connector_problems(info: dict, name: str) -> list[str]:
    """What is wrong with one connector of `chain.status`'s answer, a line each."""
    each, problems = info["connectors"][name], []
    if not info["worker_up"]:
        problems.append(f"the Kafka Connect worker does not answer at {info['connect_url']} (`lakehouse cdc up`)")
    elif each["state"] is None:
        problems.append("not registered on the Connect worker (`lakehouse cdc up`)")
    elif each["state"] != "RUNNING":
        problems.append(f"connector {each['state']}" + (f": {each['trace']}" if each["trace"] else ""))
    for number, state in enumerate(each["tasks"]):
        if state != "RUNNING":
            problems.append(f"task {number} {state}" + (f": {each['trace']}" if each["trace"] else ""))
    if not info["database_up"]:
        problems.append(f"the database {info['database']} does not answer")
    elif each["slot_exists"] and not each["slot_active"]:
        problems.append(f"slot {each['slot']} inactive: no connector reads it, it holds the database's WAL "
                        f"({each['slot_lag_bytes']} bytes so far, without bound): `lakehouse cdc up` resumes its "
                        "connector, `lakehouse cdc down --purge` drops it")
    return problems


def cdc_health(settings: Settings, registry: Registry) -> dict[str, dict]:
    """Per connector of the registry: `status` (`ok` or `problem`), `summary` (a line) and `problems`; {} when the
    registry has no `cdc:` source."""
    if not registry.cdc_sources():
        return {}
    info = chain.status(settings, registry)
    readings = _readings(settings, info)
    found = {}
    for name, each in info["connectors"].items():
        problems = connector_problems(info, name)
        history = readings.get(each["slot"], [])
        if each["slot_active"] and lag_grows(history):
            problems.append(f"slot {each['slot']} lag growing: " + " -> ".join(
                str(int(lag)) for _, lag in history[-GROWTH_READINGS:]) + " bytes")
        slot = (f"slot {each['slot']} {'active' if each['slot_active'] else 'inactive'}, lag {each['slot_lag_bytes']} "
                "bytes" if each["slot_exists"] else f"slot {each['slot']} not made")
        found[name] = {"status": "problem" if problems else "ok", "problems": problems,
                       "summary": f"{each['state'] or '-'}, tasks {', '.join(each['tasks']) or '-'}; {slot}"}
    return found


def render(health: dict[str, dict]) -> str:
    """`lakehouse health`'s lines for the connectors."""
    width = max([34, *(len(name) for name in health)])
    return "\n".join([f"{'connector':<{width}} {'status':<8} problems"]
                     + [f"{name:<{width}} {each['status']:<8} {'; '.join(each['problems']) or each['summary']}"
                        for name, each in health.items()])
