"""The storage interface (include/storage/paths.py) on a local disk and on the session's real S3 server: the same
operations, the same answers; the S3 server the product starts (`lakehouse storage`); leases on object storage."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import pytest

from include.records import lease
from include.storage.paths import MOVED_MARKER, S3Path, VersionMismatch, as_storage
from tests.support.helpers import run_cli


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return as_storage(tmp_path / "root")
    return request.getfixturevalue("s3_settings").root


def test_whole_writes_reads_and_listings_agree(root):
    (root / "a" / "one.json").write_text('{"n": 1}')
    (root / "a" / "two.json").write_bytes(b"2")
    (root / "a" / "deep" / "three.txt").write_text("3")
    assert (root / "a" / "one.json").read_text() == '{"n": 1}' and (root / "a" / "two.json").read_bytes() == b"2"
    assert (root / "a").is_dir() and not (root / "a").is_file() and (root / "a" / "one.json").is_file()
    assert (root / "a").exists() and not (root / "b").exists() and not (root / "a" / "none.json").exists()
    assert sorted(p.name for p in (root / "a").iterdir()) == ["deep", "one.json", "two.json"]
    assert sorted(p.name for p in (root / "a").glob("*.json")) == ["one.json", "two.json"]
    assert sorted(p.name for p in (root / "a").rglob("*.txt")) == ["three.txt"]
    assert sorted(size for _, size in (root / "a").rglob_files()) == [1, 1, 8]
    assert (root / "a" / "one.json").stat().st_size == 8
    with pytest.raises(FileNotFoundError):
        (root / "a" / "none.json").read_text()
    (root / "a" / "two.json").unlink()
    (root / "a" / "two.json").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        (root / "a" / "two.json").unlink()
    (root / "empty").mkdir(parents=True, exist_ok=True)
    assert (root / "empty").is_dir() and list((root / "empty").iterdir()) == []  # S3: a directory marker
    (root / "a").rmtree()
    assert not (root / "a").exists() and "a" not in [p.name for p in root.iterdir()]  # no empty directory left


def test_create_only_if_absent_and_compare_and_swap(root):
    path = root / "state" / "lease.json"
    first = path.create_exclusive(b"one")
    with pytest.raises(FileExistsError):
        path.create_exclusive(b"two")
    assert path.read_versioned() == (b"one", first)
    second = path.replace_if(b"two", first)
    with pytest.raises(VersionMismatch):
        path.replace_if(b"three", first)  # a stale version: someone wrote since
    assert path.read_text() == "two"
    with pytest.raises(VersionMismatch):
        path.delete_if(first)
    path.delete_if(second)
    assert not path.exists()
    with pytest.raises(VersionMismatch):
        path.replace_if(b"four", second)  # gone


def test_copy_and_move_and_a_move_cut_short_finishes(root):
    source = root / "ckpt"
    for name in ("metadata", "offsets/0", "offsets/1", "state/0/0/1.zip"):
        (source / name).write_text(name)
    source.copytree(root / "copy")
    assert sorted(str(p.relative_to(root / "copy")) for p, _ in (root / "copy").rglob_files()) == [
        "metadata", "offsets/0", "offsets/1", "state/0/0/1.zip"]
    if isinstance(source, S3Path):  # a move a crash cut short after its marker: moving again finishes it
        (root / "moved").mkdir()
        source.copytree(root / "moved")
        (root / "moved" / MOVED_MARKER).write_text(json.dumps({"from": source.uri}))
        (source / "offsets" / "0").unlink()
    source.move_to(root / "moved")
    assert not source.exists()
    assert (root / "moved" / "state" / "0" / "0" / "1.zip").read_text() == "state/0/0/1.zip"
    assert (root / "moved" / "offsets" / "1").read_text() == "offsets/1"


def test_a_lease_on_s3_is_taken_once_renewed_released_and_taken_over_after_its_holder(s3_settings):
    settings = replace(s3_settings, lease_seconds=6)
    held = lease.acquire(settings, "job_a", trigger="available-now")
    assert lease.is_held(settings, "job_a")
    with pytest.raises(lease.LeaseHeld, match=f"pid {os.getpid()}"):
        lease.acquire(settings, "job_a")
    expires = lease.read_lease(settings, "job_a").expires_at
    held.renew(force=True)
    assert lease.read_lease(settings, "job_a").expires_at > expires
    held.check()
    held.release()
    assert not lease.is_held(settings, "job_a") and not settings.layout.lease("job_a").exists()

    # Another host's holder: nobody takes it over while it renews; once it stops, after its expiry
    theirs = lease.acquire(replace(settings, host_name="other-host"), "job_a", trigger="processing-time=1 minute")
    with pytest.raises(lease.LeaseHeld, match="on other-host"):
        lease.acquire(settings, "job_a")
    reachable, theirs.path = theirs.path, S3Path(replace(settings.s3, endpoint="http://127.0.0.1:9"),
                                                 theirs.path.bucket, theirs.path.key)  # cut off from the store
    time.sleep(settings.lease_seconds / 2 + 0.5)
    # past half its life, nobody may take it over yet, and its holder may not commit any more: the check's last try
    # to renew it (against a store it cannot reach: seconds of retries) comes after the look from this host
    assert lease.is_held(settings, "job_a")
    with pytest.raises(lease.LeaseLost, match="not renewed"):
        theirs.check()
    time.sleep(settings.lease_seconds / 2 + 0.5)
    mine = lease.acquire(settings, "job_a")  # expired: taken over
    theirs.path = reachable
    with pytest.raises(lease.LeaseLost):
        theirs.check()
    theirs.release()  # a lost lease is left to its new holder
    assert lease.read_lease(settings, "job_a").token == mine.token

    # A holder paused past its lease (nothing renewed it), taken over meanwhile: its first check says so
    paused = mine
    time.sleep(settings.lease_seconds + 0.5)
    newer = lease.acquire(settings, "job_a")
    with pytest.raises(lease.LeaseLost, match="taken over by pid"):
        paused.check()
    assert lease.read_lease(settings, "job_a").token == newer.token
    newer.release()


def test_a_lease_of_a_process_gone_from_this_host_is_taken_at_once(s3_settings):
    settings = replace(s3_settings, lease_seconds=600)
    path = settings.layout.lease("job_b")
    owner = {"job": "job_b", "pid": 2 ** 22 + 17, "pid_start": "1", "host": settings.host_name, "acquired_at": "x",
             "expires_at": time.time() + 600, "trigger": "available-now", "token": "t", "sequence": 0}
    path.write_text(json.dumps(owner))  # a SIGKILLed driver's record: its pid no longer runs here
    assert not lease.is_held(settings, "job_b")
    taken = lease.acquire(settings, "job_b")
    assert lease.read_lease(settings, "job_b").pid == os.getpid()
    taken.release()


def test_the_storage_command_starts_the_server_once_and_reports_it(s3_server, s3_env, tmp_path):
    env = {**s3_env, "LAKEHOUSE_LOCAL_DIR": str(tmp_path / "other")}
    again = run_cli(["storage", "up"], env, timeout=60)
    assert again.returncode == 0 and "already answers" in again.stderr, again.stderr
    status = run_cli(["storage", "status", "--json"], env, timeout=60)
    info = json.loads(status.stdout)
    assert info["up"] is True and info["endpoint"] == s3_server and info["root"] == env["LAKEHOUSE_ROOT"]
    assert (info["access_key_id"], info["secret_access_key"]) == (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    host, port = s3_server.removeprefix("http://").split(":")
    taken = run_cli(["storage", "up"], {**env, "LAKEHOUSE_S3_ENDPOINT": f"http://{host}:{int(port) + 1}"}, timeout=60)
    assert taken.returncode == 1 and len(taken.stderr.strip().splitlines()) == 1, taken.stderr
    assert f"port {int(port) + 1} on {host} is taken" in taken.stderr
    wrong = run_cli(["summary"], {**env, "AWS_SECRET_ACCESS_KEY": "wrong"}, timeout=60)
    assert wrong.returncode == 2 and "refused the credentials" in wrong.stderr, wrong.stderr


def test_the_demo_starts_an_s3_server_only_when_none_answers_and_stops_what_it_started(s3_server, s3_settings,
                                                                                       tmp_path, monkeypatch):
    """`lakehouse demo`'s store (include.cli.store_for_demo) on an S3 root: the session's server answers, so nothing
    is started or stopped; at an endpoint nothing answers, a server of its own (credentials made and kept for it)
    with the root's bucket, stopped at the end, its data kept. (The whole demo on S3: `make test-full`.)"""
    from include.cli import store_for_demo
    from include.objectstore import server
    from include.settings import load_settings
    from include.storage.s3 import bucket_problem
    from tests.support.s3 import free_s3_port

    with store_for_demo(s3_settings) as inside:
        assert inside is s3_settings and server.answers(s3_settings.s3)
    assert server.answers(s3_settings.s3)

    endpoint = f"http://127.0.0.1:{free_s3_port()}"
    for name, value in (("LAKEHOUSE_ROOT", "s3://lakehouse-demo/demo"), ("LAKEHOUSE_S3_ENDPOINT", endpoint),
                        ("LAKEHOUSE_LOCAL_DIR", str(tmp_path / "local"))):
        monkeypatch.setenv(name, value)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    own = load_settings()
    assert not server.answers(own.s3)
    with store_for_demo(own) as inside:
        assert server.answers(inside.s3) and inside.s3.access_key_id, inside.s3
        assert bucket_problem(inside.s3, "lakehouse-demo") is None
        (inside.root / "marker").write_bytes(b"kept")
    assert not server.answers(replace(own.s3, access_key_id=inside.s3.access_key_id))
    assert (own.layout.s3_server / "data").is_dir()  # the data directory stays for the next start


def test_what_the_lakehouse_writes_any_s3_client_reads(s3_settings):
    """Delta tables written through delta-rs on the S3 root read back with pyarrow's own S3 client too."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from include.storage import delta as delta_store

    table = s3_settings.layout.ops_table("probe")
    delta_store.append_rows(table, {"n": "long"}, [{"n": 1}, {"n": 2}])
    s3 = s3_settings.s3
    fs = pafs.S3FileSystem(access_key=s3.access_key_id, secret_key=s3.secret_access_key, region=s3.region,
                           endpoint_override=s3.endpoint.removeprefix("http://"), scheme="http")
    files = [f.path for f in fs.get_file_info(pafs.FileSelector(f"{table.bucket}/{table.key}"))
             if f.path.endswith(".parquet")]
    assert sum(pq.read_table(f, filesystem=fs).num_rows for f in files) == 2


def test_operational_appends_follow_a_table_restored_or_recreated_under_them(root):
    """append_rows keeps one delta-rs handle per table and thread, updated on each append: a table put back to an
    older copy, or deleted, under that handle is read again, never appended to at the handle's stale version."""
    from include.storage import delta as delta_store

    table, saved = root / "_ops" / "probe", root / "saved_probe"

    def versions() -> list[int]:
        return sorted(int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.json"))

    for n in range(3):
        delta_store.append_rows(table, {"n": "long"}, [{"n": n}])
    table.copytree(saved)
    for n in range(3, 5):
        delta_store.append_rows(table, {"n": "long"}, [{"n": n}])
    table.rmtree()
    saved.copytree(table)  # back to 3 rows, at version 3
    delta_store.append_rows(table, {"n": "long"}, [{"n": 9}])
    assert delta_store.count_rows(table) == 4 and versions() == list(range(5))
    table.rmtree()
    delta_store.append_rows(table, {"n": "long"}, [{"n": 10}])
    assert delta_store.read_table(table)["n"].to_pylist() == [10] and versions() == [0, 1]


def test_writers_that_make_one_operational_table_at_once_all_land(root):
    """Queries of one driver append their first rows to an operational table at once: one of them makes it, the
    others find it made (delta-rs failed their creation with "protocol changed" before) and every row lands."""
    import threading

    from include.storage import delta as delta_store

    failures = []

    def append(table, n: int) -> None:
        try:
            delta_store.append_rows(table, {"n": "long"}, [{"n": n}])
        except Exception as exc:  # reported below, with the round
            failures.append(repr(exc))

    for round_ in range(8):
        table = root / "_ops" / f"made_at_once_{round_}"
        writers = [threading.Thread(target=append, args=(table, n)) for n in range(4)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert not failures, f"round {round_}: {failures}"
        assert sorted(delta_store.read_table(table)["n"].to_pylist()) == [0, 1, 2, 3]
