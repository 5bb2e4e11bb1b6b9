"""The clickstream generator: deterministic per seed, with every kind of imperfection asked for."""

from __future__ import annotations

import json

import pytest

from include.generator import GeneratorConfig, generate_lines, write_landing


def test_same_seed_same_lines_other_seed_other_lines():
    config = GeneratorConfig(events=2000, seed=5)
    assert generate_lines(config) == generate_lines(GeneratorConfig(events=2000, seed=5))
    assert generate_lines(config)[0] != generate_lines(GeneratorConfig(events=2000, seed=6))[0]


def test_imperfections_are_present_in_the_configured_proportions():
    lines, kinds = generate_lines(GeneratorConfig(events=20000, seed=1, duplicate_fraction=0.05,
                                                  late_fraction=0.02, malformed_fraction=0.02))
    assert len(lines) == 20000 + kinds["duplicate"]
    assert 0.04 < kinds["duplicate"] / 20000 < 0.06
    assert 0.015 < kinds["late"] / 20000 < 0.025
    malformed = {k: v for k, v in kinds.items() if k.startswith("malformed:")}
    assert set(malformed) == {"malformed:malformed_json", "malformed:missing_event_time",
                              "malformed:unparseable_event_time", "malformed:wrong_type", "malformed:missing_event_id"}
    parsed = [json.loads(line) for line in lines[:200] if line.startswith("{") and line.endswith("}")]
    assert {"event_id", "user_id", "event_type", "value", "event_time"} <= set(parsed[0])
    ids = [json.loads(line)["event_id"] for line in lines if '"event_id"' in line and line.endswith("}")]
    assert len(ids) - len(set(ids)) == kinds["duplicate"]


def test_files_are_written_atomically_in_arrival_order(tmp_path):
    result = write_landing(tmp_path, "clickstream", GeneratorConfig(events=500, seed=3, files=4))
    assert len(result.files) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    mtimes = [p.stat().st_mtime for p in result.files]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == 4
    assert sum(len(p.read_text().splitlines()) for p in result.files) == result.lines
    later = write_landing(tmp_path, "clickstream", GeneratorConfig(events=100, seed=4, files=1))
    assert later.files[0].stat().st_mtime > max(mtimes)


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="--late-fraction must be between 0 and 1"):
        generate_lines(GeneratorConfig(events=10, seed=1, late_fraction=1.5))
    with pytest.raises(ValueError, match="--files must be at least 1"):
        generate_lines(GeneratorConfig(events=10, seed=1, files=0))


def test_payments_belong_to_the_purchases_of_the_same_clickstream():
    from datetime import datetime, timedelta

    from include.generator import PAID_AFTER, PAID_WITHIN, generate_payment_lines

    config = GeneratorConfig(events=4000, seed=8, malformed_fraction=0.0)
    lines, kinds = generate_payment_lines(config)
    assert (lines, kinds) == generate_payment_lines(GeneratorConfig(events=4000, seed=8, malformed_fraction=0.0))
    purchases = {}
    for line in generate_lines(config)[0]:
        event = json.loads(line)
        if event["event_type"] == "purchase":
            purchases.setdefault(event["event_id"], datetime.fromisoformat(event["event_time"]))
    payments = [json.loads(line) for line in lines]
    assert len(payments) == kinds["paid"] + kinds["paid_late"] + kinds["duplicate"]
    assert kinds["paid"] + kinds["paid_late"] + kinds["unpaid"] == len(purchases)
    assert 0.65 < kinds["paid"] / len(purchases) < 0.85 and kinds["paid_late"] and kinds["unpaid"]
    delays = {p["payment_id"]: datetime.fromisoformat(p["payment_time"]) - purchases[p["order_id"]] for p in payments}
    within = [d for d in delays.values() if timedelta(seconds=PAID_WITHIN[0]) <= d <= timedelta(seconds=PAID_WITHIN[1])]
    after = [d for d in delays.values() if timedelta(seconds=PAID_AFTER[0]) <= d <= timedelta(seconds=PAID_AFTER[1])]
    assert (len(within), len(after)) == (kinds["paid"], kinds["paid_late"])
    distinct = list(dict.fromkeys(json.dumps(p) for p in payments))
    distinct_times = [datetime.fromisoformat(json.loads(p)["payment_time"]) for p in distinct]
    assert distinct_times == sorted(distinct_times), "payments arrive in payment-time order (duplicates aside)"


def test_payments_have_their_own_malformed_lines_and_unknown_sources_are_refused(tmp_path):
    from include.generator import generate_payment_lines

    lines, kinds = generate_payment_lines(GeneratorConfig(events=4000, seed=9, malformed_fraction=0.2))
    malformed = {k.split(":", 1)[1] for k in kinds if k.startswith("malformed:")}
    assert malformed == {"malformed_json", "missing_payment_time", "unparseable_payment_time", "wrong_type",
                         "missing_payment_id"}
    with pytest.raises(ValueError, match="no test-data generator for source 'refunds'"):
        write_landing(tmp_path, "refunds", GeneratorConfig(events=10, seed=1))


def test_service_logs_have_silent_services_that_come_back_and_every_imperfection():
    from datetime import datetime, timedelta

    from include.generator import DEFAULT_START, generate_service_log_lines

    config = GeneratorConfig(events=6000, seed=3, users=10, duplicate_fraction=0.05, late_fraction=0.02,
                             malformed_fraction=0.05)
    lines, kinds = generate_service_log_lines(config)
    assert (lines, kinds) == generate_service_log_lines(config)  # deterministic per seed
    assert lines != generate_service_log_lines(GeneratorConfig(events=6000, seed=4, users=10))[0]
    assert {k.split(":", 1)[1] for k in kinds if k.startswith("malformed:")} == {
        "malformed_json", "missing_event_time", "unparseable_event_time", "missing_service", "missing_level"}
    assert kinds["duplicate"] > 0 and kinds["late"] > 0 and kinds["out_of_order"] > 0
    logs = [json.loads(line) for line in lines if line.endswith("}")]
    logs = [r for r in logs if {"service", "level", "event_time"} <= set(r)
            and r["event_time"] != "not-a-timestamp"]
    assert {r["level"] for r in logs} == {"INFO", "WARN", "ERROR"}
    span = timedelta(minutes=6000 / config.events_per_minute)
    third = {0: [], 1: [], 2: []}
    for r in logs:
        offset = datetime.fromisoformat(r["event_time"]) - DEFAULT_START
        if timedelta(0) <= offset < span:
            third[min(2, int(offset / (span / 3)))].append(r["service"])
    silent = {"svc_000", "svc_005"}
    assert silent <= set(third[0]) and silent <= set(third[2])  # present before and after the silence
    assert not silent & set(third[1]), "a silent service logged during its silence"
    assert len(set(third[1])) == 8
