"""Airflow's REST API as a person's browser uses it: a token from /auth/token, then /api/v2."""

from __future__ import annotations

import json
import time
import urllib.request


class AirflowApi:
    def __init__(self, base: str, user: str, password: str):
        self.base = base
        self.token = self.call("POST", "/auth/token", {"username": user, "password": password})["access_token"]

    def call(self, method: str, path: str, body: dict | None = None):
        headers = {"Content-Type": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.base + path, method=method, headers=headers,
                                         data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def trigger(self, dag_id: str, conf: dict) -> str:
        """Unpause the DAG (a paused DAG's runs wait) and trigger a run, as the UI's Trigger button does."""
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        return self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        found = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")
        return {t["task_id"]: t["state"] for t in found["task_instances"]}

    def wait(self, dag_id: str, run_id: str, timeout: float) -> str:
        """The run's final state (success or failed); AssertionError with the task states after `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise AssertionError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s: "
                             f"{self.task_states(dag_id, run_id)}")
