"""The checkpoint request's one grammar: the command line, the DAG form and spark-submit's argv agree, and a
malformed request is one line naming what is wrong, whatever the entrance (no Spark)."""

from __future__ import annotations

import argparse

import pytest

from include.checkpoints.request import (
    APPLIED_MODES,
    MODES,
    CheckpointRequest,
    RequestInvalid,
    add_arguments,
    from_args,
    from_params,
    verify_request,
)


def parse(argv: list[str]) -> CheckpointRequest:
    parser = argparse.ArgumentParser(prog="checkpoint", exit_on_error=False)
    sub = parser.add_subparsers(dest="mode", required=True)
    for name in MODES:
        add_arguments(sub.add_parser(name, exit_on_error=False), name)
    args = parser.parse_args(argv)
    return from_args(args.mode, args)


@pytest.mark.parametrize("request_", [
    CheckpointRequest("full-refresh", ("silver_clickstream",), options={"cascade": True}),
    CheckpointRequest("full-refresh", ("a", "b"), dry_run=True, keep=2),
    CheckpointRequest("reset-checkpoint", ("silver_clickstream",), options={"from_version": 0}),
    CheckpointRequest("reset-checkpoint", ("silver_clickstream",), options={"from_timestamp": "2026-11-23T10:00:00Z"}),
    CheckpointRequest("reset-checkpoint", ("silver_clickstream",), options={"from_latest": True}),
    CheckpointRequest("repartition", ("gold_user_activity_5m",)),
    CheckpointRequest("rollback", ("gold_user_activity_5m",), options={"to_batch": 3}),
    verify_request(["a", "b"], run=False),
])
def test_argv_parses_back_to_the_same_request(request_):
    assert parse(request_.to_argv()) == request_


def test_the_form_gives_the_same_request_as_the_command_line():
    form = {"jobs": ["silver_clickstream"], "mode": "reset-checkpoint", "dry_run": False, "cascade": False,
            "from_version": None, "from_timestamp": "2026-11-23T11:00:00+01:00", "from_latest": False,
            "to_batch": None}
    assert from_params(form) == parse(["reset-checkpoint", "silver_clickstream",
                                       "--from-timestamp", "2026-11-23T10:00:00Z"])
    assert from_params({"jobs": ["x"], "mode": "repartition"}).dry_run  # the form's default is a dry run
    assert set(APPLIED_MODES) == set(MODES) - {"verify"}


@pytest.mark.parametrize(("make", "message"), [
    (lambda: CheckpointRequest("reset-checkpoint", ("s",)), "exactly one of --from-version, --from-timestamp"),
    (lambda: CheckpointRequest("reset-checkpoint", ("s",), options={"from_version": 1, "from_latest": True}),
     "exactly one of"),
    (lambda: CheckpointRequest("rollback", ("a", "b"), options={"to_batch": 1}), "takes one job"),
    (lambda: CheckpointRequest("rollback", ("a",)), "rollback needs --to-batch"),
    (lambda: CheckpointRequest("repartition", ("a",), options={"cascade": True}), "repartition takes no --cascade"),
    (lambda: CheckpointRequest("explode", ("a",)), "unknown mode 'explode'"),
    (lambda: CheckpointRequest("full-refresh", ()), "needs at least one job"),
    (lambda: from_params({"jobs": ["a"], "mode": "full-refresh", "to_batch": 3}),
     "to_batch is not an option of full-refresh"),
    (lambda: from_params({"jobs": ["a"], "mode": "reset-checkpoint", "from_timestamp": "garbage"}),
     "from_timestamp: not an ISO-8601 timestamp: 'garbage'"),
    (lambda: from_params({"jobs": ["a"], "mode": "reset-checkpoint", "from_timestamp": "2026-01-01T00:00:00"}),
     "needs a UTC offset"),
    (lambda: from_params({"jobs": ["a"], "mode": "verify"}), "mode must be one of"),
    (lambda: from_params({"jobs": ["a"], "mode": None}), "choose a mode: one of full-refresh"),
    (lambda: from_params({"jobs": None, "mode": "full-refresh"}), "full-refresh needs at least one job"),
])
def test_malformed_requests_are_one_line(make, message):
    with pytest.raises(RequestInvalid, match=message) as err:
        make()
    assert "\n" not in str(err.value)


def test_flags_a_mode_does_not_take_are_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit):
        parse(["repartition", "gold_user_activity_5m", "--partitions", "8"])
    assert "its only source" in capsys.readouterr().err
    with pytest.raises(argparse.ArgumentError, match="must be 0 or more"):
        parse(["reset-checkpoint", "s", "--from-version", "-5"])
