"""How a job is run: its `triggers`, `state_store`, `supervision`, `resources` and `quality` sections.

Each section refines the registry's `defaults` of the same name (the job's fields win), except `quality`,
which is the job's own.
"""

from __future__ import annotations

import re
from typing import Any

from include.registry.checks import CHECKS, SEVERITIES
from include.registry.context import LoadContext
from include.registry.durations import Trigger, parse_duration
from include.registry.processors import PROCESSORS
from include.registry.specs import (
    JIT_OPTIONS,
    LIVE_ONLY,
    MAX_SHUFFLE_PARTITIONS,
    HealthThresholds,
    ParseJson,
    QualitySpec,
    ResourcesSpec,
    StatefulProcess,
    StateStoreSpec,
    SupervisionSpec,
)
from include.registry.vocabulary import QUALITY_KINDS, STATE_PROVIDERS


def _with_defaults(ctx: LoadContext, section: str, own: Any) -> dict:
    return {**ctx.defaults.get(section, {}), **(own or {})}


def parse_triggers(ctx: LoadContext, where: str, own: Any) -> dict[str, Trigger]:
    """The job's backfill and live triggers."""
    raw = _with_defaults(ctx, "triggers", own)
    triggers: dict[str, Trigger] = {}
    for name in ("backfill", "live"):
        try:
            triggers[name] = Trigger.parse(raw.get(name, "available-now" if name == "backfill" else ""))
        except ValueError as exc:
            ctx.problem(where, f"triggers.{name}: {exc}")
    return triggers


def parse_state_store(ctx: LoadContext, where: str, own: Any, transform_kind: Any) -> StateStoreSpec | None:
    """The job's state store; None when a number or the changelog flag is invalid."""
    raw = _with_defaults(ctx, "state_store", own)
    provider = raw.get("provider", "rocksdb")
    if provider not in STATE_PROVIDERS:
        ctx.problem(where, f"state_store.provider: unknown provider {provider!r}")
    numbers = {}
    for name, default in (("shuffle_partitions", 4), ("min_batches_to_retain", 20)):
        value = ctx.positive_int(f"{where}: state_store.{name}", raw.get(name, default))
        if value is None:
            return None
        numbers[name] = value
    changelog = raw.get("changelog_checkpointing", True)
    if not isinstance(changelog, bool) and changelog != LIVE_ONLY:
        ctx.problem(where, f"state_store.changelog_checkpointing: must be true, false or {LIVE_ONLY!r} (changelogs "
                           f"in live runs, snapshots in available-now runs), got {changelog!r}")
        return None
    if numbers["shuffle_partitions"] > MAX_SHUFFLE_PARTITIONS:
        ctx.problem(where, f"state_store.shuffle_partitions: at most {MAX_SHUFFLE_PARTITIONS}, "
                    f"got {numbers['shuffle_partitions']}")
        return None
    if provider != "rocksdb" and transform_kind == StatefulProcess.kind:
        ctx.problem(where, f"state_store.provider: a stateful_process job keeps its state in RocksDB "
                    f"(Spark's transformWithState needs its column families), got {provider!r}")
    return StateStoreSpec(
        provider=provider,
        changelog_checkpointing=changelog,
        shuffle_partitions=numbers["shuffle_partitions"],
        min_batches_to_retain=numbers["min_batches_to_retain"],
    )


def parse_supervision(ctx: LoadContext, where: str, own: Any) -> SupervisionSpec:
    """How `lakehouse_live` treats the job; its health thresholds refine the defaults' one by one."""
    raw = _with_defaults(ctx, "supervision", own)
    health = [(ctx.defaults.get("supervision") or {}).get("health"), (own or {}).get("health")]
    if all(isinstance(h, dict) for h in health):
        raw["health"] = {**health[0], **health[1]}
    ctx.unknown_fields(f"{where}: supervision", raw, SupervisionSpec.__dataclass_fields__)
    on_down = raw.get("on_down", "restart")
    if on_down not in ("restart", "alert"):
        ctx.problem(where, f"supervision.on_down: must be 'restart' or 'alert', got {on_down!r}")
    numbers = {}
    for name in ("max_restarts", "backoff_seconds", "stall_after_seconds", "health_window_batches"):
        value = raw.get(name, getattr(SupervisionSpec, name))
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            ctx.problem(where, f"supervision.{name}: must be a non-negative integer, got {value!r}")
            value = getattr(SupervisionSpec, name)
        numbers[name] = value
    return SupervisionSpec(on_down=on_down, health=_health(ctx, where, raw.get("health") or {}), **numbers)


def _health(ctx: LoadContext, where: str, raw: Any) -> HealthThresholds:
    """`supervision.health`: the health thresholds (fractions in (0, 1], a skew ratio >= 1, counts)."""
    if not isinstance(raw, dict):
        ctx.problem(where, "supervision.health: must map thresholds to numbers")
        return HealthThresholds()
    known = HealthThresholds.__dataclass_fields__
    ctx.unknown_fields(f"{where}: supervision.health", raw, known, f"(known: {', '.join(known)})")
    values: dict[str, Any] = {}
    whole = ("skew_min_keys", "max_state_rows")
    for name, low, high in (("max_dropped_fraction", 0, 1), ("state_memory_fraction", 0, 1),
                            ("max_partition_skew", 1, None), ("skew_min_keys", 0, None),
                            ("max_quarantined_fraction", 0, 1), ("max_state_rows", 0, None)):
        value = raw.get(name, getattr(HealthThresholds, name))
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or value < low or (high is not None and value > high) or (name in whole
                                                                               and not isinstance(value, int)):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            kind = "an integer" if name in whole else "a number"
            ctx.problem(where, f"supervision.health.{name}: must be {kind} {bound}, got {value!r}")
            value = getattr(HealthThresholds, name)
        values[name] = value
    return HealthThresholds(**values)


def parse_quality(ctx: LoadContext, where: str, raw: Any, transform: dict) -> QualitySpec:
    """The job's `quality:` section: `freshness_lag` (a duration) and `severity` overrides."""
    if raw is None:
        return QualitySpec()
    if not isinstance(raw, dict):
        ctx.problem(where, "quality: must be a mapping with 'freshness_lag' and/or 'severity'")
        return QualitySpec()
    processor = transform.get("processor")
    info = PROCESSORS.get(processor) if transform.get("kind") == StatefulProcess.kind and isinstance(processor, str) else None
    if transform.get("kind") not in QUALITY_KINDS or (info is not None and not info.suite):
        ctx.problem(where, f"quality: only {', '.join(QUALITY_KINDS[:-1])} jobs and stateful_process jobs "
                    "of a processor with a suite have quality suites")
    ctx.unknown_fields(f"{where}: quality", raw, ("freshness_lag", "severity"))
    lag = None
    if raw.get("freshness_lag") is not None:
        if transform.get("kind") == ParseJson.kind:
            ctx.problem(where, "quality.freshness_lag: a parse_json (bronze) table's suite has no freshness check; "
                        "its only check is no_rescued_fields")
        try:
            lag = parse_duration(raw["freshness_lag"])
            if lag <= 0:
                raise ValueError("must be positive")
        except ValueError as exc:
            ctx.problem(where, f"quality.freshness_lag: {exc}")
    severity = raw.get("severity") or {}
    if not isinstance(severity, dict):
        ctx.problem(where, f"quality.severity: must map expectation names to {' or '.join(SEVERITIES)}")
        severity = {}
    for name, level in severity.items():
        if name not in CHECKS:
            ctx.problem(where, f"quality.severity.{name}: unknown expectation (known: {', '.join(CHECKS)})")
        elif level not in SEVERITIES:
            ctx.problem(where, f"quality.severity.{name}: must be {' or '.join(SEVERITIES)}, got {level!r}")
    return QualitySpec(freshness_lag_seconds=lag, severity={str(k): str(v) for k, v in severity.items()})


MEMORY = re.compile(r"^[1-9][0-9]*[kmgt]$")  # Spark's JVM memory settings: 512m, 2g


def jvm_memory_bytes(text: str) -> int | None:
    """Bytes of a JVM memory setting such as "2g" or "512m" (None when unreadable). In local mode the executors
    run in the driver's JVM, so the driver memory is the executor memory."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    text = text.strip().lower().removesuffix("b")
    if text[-1:] in units and text[:-1].isdigit():
        return int(text[:-1]) * units[text[-1]]
    return int(text) if text.isdigit() else None


def parse_resources(ctx: LoadContext, where: str, own: Any) -> ResourcesSpec:
    """What a driver (a job alone, or a group: `where` says which) asks of Spark, refining `defaults.resources`."""
    if own is not None and not isinstance(own, dict):
        ctx.problem(where, "resources: must be a mapping of driver_memory, executor_memory, executor_cores, cores_max, "
                           "live_jit")
        own = None
    raw = _with_defaults(ctx, "resources", own)
    ctx.unknown_fields(f"{where}: resources", raw, ("driver_memory", "executor_memory", "executor_cores", "cores_max",
                                                    "live_jit"))
    values: dict[str, Any] = {}
    for name in ("driver_memory", "executor_memory"):
        value = raw.get(name)
        if value is not None and not (isinstance(value, str) and MEMORY.match(value.lower())):
            ctx.problem(where, f"resources.{name}: a JVM memory size such as 512m or 2g, got {value!r}")
        elif value is not None:
            values[name] = value.lower()
    for name in ("executor_cores", "cores_max"):
        if raw.get(name) is not None:
            values[name] = ctx.positive_int(f"{where}: resources.{name}", raw[name])
    jit = raw.get("live_jit")
    if jit is not None and jit not in JIT_OPTIONS:
        ctx.problem(where, f"resources.live_jit: {' or '.join(JIT_OPTIONS)} (the live driver's JIT compilers), "
                           f"got {jit!r}")
    elif jit is not None:
        values["live_jit"] = jit
    return ResourcesSpec(**values)
