"""`lakehouse generate`: deterministic test data, as landing files or as messages on a source's topic."""

from __future__ import annotations

import argparse
import json
import sys

from include import arguments
from include.cdc import shop
from include.cdc.database import LOCAL_DATABASE
from include.cli.command import command
from include.generator import (
    DEFAULT_START,
    GenerationResult,
    GeneratorConfig,
    produce_to_topic,
    write_landing,
)
from include.kafka.connection import bootstrap_servers
from include.registry import SourceSpec, load_registry
from include.settings import Settings


def generate_into(settings: Settings, source: SourceSpec, config: GeneratorConfig, to: str | None = None,
                  partitions: int = 3) -> GenerationResult:
    """The generator's records of `source` as landing files, or as messages on its topic (the default: what the
    source reads)."""
    to = to or ("kafka" if source.kind == "kafka" else "files")
    if to == "files":
        if source.kind != "landing":
            raise ValueError(f"source {source.name!r} reads Kafka topic(s) {source.path}, not files: use --to kafka")
        return write_landing(settings.layout.landing(source.path), source.name, config)
    if source.kind != "kafka":
        raise ValueError(f"source {source.name!r} reads landing files ({source.path}), not a topic: use --to files")

    return produce_to_topic(bootstrap_servers(settings, source.kafka.connection), source.kafka.topics[0],
                            source.name, config, partitions)


def _arguments(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("--source", required=True)
    gen.add_argument("--events", type=arguments.positive_int, required=True)
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--files", type=arguments.positive_int, default=10)
    gen.add_argument("--start", type=arguments.timestamp, help="event time of the first event (default 2026-01-01T00:00:00Z)")
    gen.add_argument("--events-per-minute", type=float, default=20.0)
    gen.add_argument("--users", type=arguments.positive_int,
                     help="distinct users (service_logs: services); default: one per 100 events (200), at least 5")
    gen.add_argument("--duplicate-fraction", type=arguments.fraction, default=0.02)
    gen.add_argument("--out-of-order-fraction", type=arguments.fraction, default=0.05)
    gen.add_argument("--late-fraction", type=arguments.fraction, default=0.01)
    gen.add_argument("--malformed-fraction", type=arguments.fraction, default=0.01)
    gen.add_argument("--to", choices=("files", "kafka"),
                     help="landing files, or messages on the source's topic (default: what the source reads)")
    gen.add_argument("--partitions", type=arguments.positive_int, default=3,
                     help="--to kafka: partitions of a topic created for it (an existing topic keeps its own)")


@command("generate", "write deterministic test data into landing/<source>/, a source's topic, or (`--source shop`) "
                     "transactions into the CDC demo database", _arguments)
def generate(settings: Settings, args: argparse.Namespace) -> int:
    if args.source == LOCAL_DATABASE:  # the CDC demo database: real transactions (include/cdc/shop.py)
        sys.stdout.write(json.dumps(shop.run(settings, args.events, args.seed).summary(), indent=2) + "\n")
        return 0
    registry = load_registry(settings.registry_path)
    captured = {s.name: s.cdc.database for tables in registry.cdc_sources().values() for s in tables}
    if args.source in captured:
        raise ValueError(f"source {args.source!r} is a database table's changes: they come from its database "
                         f"(`lakehouse generate --source {LOCAL_DATABASE}` writes the demo's)")
    sources = {j.source.name: j.source for j in registry.jobs.values()
               if j.source.kind in ("landing", "kafka") and j.source.cdc is None}
    if args.source not in sources:
        raise ValueError(f"unknown source {args.source!r}; the registry's landing and Kafka sources: {sorted(sources)}"
                         f", and {LOCAL_DATABASE!r} (the CDC demo database)")
    config = GeneratorConfig(
        events=args.events, seed=args.seed, files=args.files, start=args.start or DEFAULT_START,
        events_per_minute=args.events_per_minute, users=args.users, duplicate_fraction=args.duplicate_fraction,
        out_of_order_fraction=args.out_of_order_fraction, late_fraction=args.late_fraction,
        malformed_fraction=args.malformed_fraction,
    )
    result = generate_into(settings, sources[args.source], config, args.to, args.partitions)
    sys.stdout.write(json.dumps(result.summary(), indent=2) + "\n")
    return 0
