"""`lakehouse airflow-history` (include/airflow/history.py): what it deletes of Airflow's log folder. Its `airflow db
clean` on the embedded SQLite database is proven after the demo (tests/test_demo.py), on PostgreSQL by the cluster's
`airflow-history` part (tests/test_cluster.py); its setting's bad values in tests/test_ops_retention.py."""

from __future__ import annotations

import os
import time

from include.airflow.history import remove_old_logs

DAY = 86400.0


def write(path, text: str, age_days: float):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    when = time.time() - age_days * DAY
    os.utime(path, (when, when))
    return path


def test_log_files_older_than_the_cutoff_go_with_their_empty_folders(tmp_path):
    logs = tmp_path / "logs"
    old_run = logs / "dag_id=lakehouse_live" / "run_id=scheduled__2026-10-01T00:00:00+00:00"
    old = [write(old_run / "task_id=check_jobs" / f"attempt={n}.log", "x" * 100, 40) for n in (1, 2)]
    mixed = logs / "dag_id=lakehouse_live" / "run_id=manual__2026-10-02"
    write(mixed / "task_id=a" / "attempt=1.log", "y" * 10, 40)
    kept_in_mixed = write(mixed / "task_id=b" / "attempt=1.log", "recent", 1)
    new = write(logs / "dag_id=lakehouse_live" / "run_id=scheduled__2026-11-28" / "task_id=c" / "attempt=1.log",
                "new", 0)
    not_a_log = write(logs / "dag_id=lakehouse_live" / "notes.txt", "kept whatever its age", 40)
    processor = logs / "dag_processor"
    write(processor / "2026-10-01" / "dags-folder" / "lakehouse_dags.py.log", "z" * 50, 40)
    today = write(processor / "2026-11-29" / "dags-folder" / "lakehouse_dags.py.log", "today", 0)
    (processor / "latest").symlink_to(processor / "2026-11-29")
    (processor / "stale").symlink_to(processor / "2026-10-01")

    assert remove_old_logs(logs, time.time() - 30 * DAY) == (4, 260)

    assert not any(p.exists() for p in old) and not old_run.exists()
    assert not (mixed / "task_id=a").exists() and kept_in_mixed.read_text() == "recent"
    assert new.exists() and not_a_log.exists() and today.exists()
    assert not (processor / "2026-10-01").exists() and not (processor / "stale").is_symlink()
    assert (processor / "latest").resolve() == (processor / "2026-11-29").resolve() and logs.is_dir()
    assert remove_old_logs(logs, time.time() - 30 * DAY) == (0, 0)  # again: nothing more
    assert remove_old_logs(tmp_path / "none", time.time()) == (0, 0)

