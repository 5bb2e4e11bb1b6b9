"""Background processes started by the project (the Kafka broker, the S3 server, the catalog, the parts of `lakehouse
cluster`): started in a session of their own so they outlive the command that started them, remembered by a pid
file, stopped with SIGTERM to their process group and SIGKILL after a grace period; kept running by :mod:`.keeper`.
It imports nothing of the project.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from include.daemons.keeper import RESTARTING

log = logging.getLogger(__name__)

KEEPER = Path(__file__).with_name("keeper.py")
START_MARK = "\n$ "  # the line Daemon.start writes to the log before the command's output


def alive(pid: int) -> bool:
    """The process lives (a zombie child of this process is reaped and counts as gone)."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    status = Path(f"/proc/{pid}/stat")
    try:
        return status.read_text().split()[2] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def terminate(pid: int, name: str, timeout: float, group: bool = False) -> None:
    """SIGTERM the process (or its process group), wait until it has exited, SIGKILL it after `timeout`."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            break
        time.sleep(0.2)
    else:
        log.warning("%s (pid %s) did not stop within %.0f s: killing it", name, pid, timeout)
    if group or alive(pid):  # a group's stragglers (workers, executors) go too
        try:
            send(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def spark_home() -> Path:
    """Where pyspark is installed: Spark's launchers (`bin/spark-class`, `bin/beeline`) and its jars."""
    return Path(importlib.util.find_spec("pyspark").origin).parent


def java(needed_by: str) -> str:
    """The `java` that starts a server's JVM (JAVA_HOME's, else the PATH's); RuntimeError naming what to install."""
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not found or not Path(found).exists():
        raise RuntimeError(f"Java is missing: {needed_by} needs a Java 17+ runtime (apt-get install "
                           "openjdk-17-jre-headless, or set JAVA_HOME)")
    return found


def get_json(url: str, timeout: float = 3.0) -> dict | None:
    """The JSON document a part serves at `url`, or None while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def port_taken(host: str, port: int) -> bool:
    """Another program listens on (or holds) host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


_chosen: set[int] = set()  # every port free_port_block chose in this process: a server it is for may not listen yet
# The ports chosen by the processes of this host that live: a file per port holding its chooser's pid.
PORT_CLAIMS = Path(tempfile.gettempdir()) / "lakehouse-port-claims"


def _claim(port: int) -> bool:
    """Claim `port` for this process unless a living other process claimed it. Claims are read and written under one
    lock for the host, so no chooser sees another's claim half-written (an empty claim reads as abandoned)."""
    try:
        PORT_CLAIMS.mkdir(exist_ok=True)
        lock = os.open(PORT_CLAIMS / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:  # no claims here (another user's directory): this process's own choices still hold
        return True
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies holding it
        claim = PORT_CLAIMS / str(port)
        try:
            holder = int(claim.read_text() or 0)
        except (OSError, ValueError):
            holder = 0
        if holder and holder != os.getpid() and alive(holder):
            return False
        claim.write_text(str(os.getpid()))  # a new claim, or one whose chooser is gone
        return True
    finally:
        os.close(lock)


def free_port_block(offsets: list[int], host: str = "127.0.0.1") -> int:
    """A port p with p + each offset free on `host`, all below the kernel's ephemeral range: a port chosen now and
    bound by a server later is not meanwhile taken by some client connection's local port (the tests' and benchmarks'
    private servers). No port chosen before is chosen again while its chooser lives, in this process or another of
    this host (PORT_CLAIMS): its server may not listen yet (the ports one test chooses for the servers of one
    `lakehouse cluster up` could otherwise coincide, and so could two test workers' choices)."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    top = ephemeral - max(offsets) - 1
    for _ in range(200):
        port = random.randint(10000, top)
        block = {port + offset for offset in offsets}
        if block & _chosen or any(port_taken(host, p) for p in block):
            continue
        if not all(_claim(p) for p in sorted(block)):  # a claim another took first: left to its holder's exit
            continue
        _chosen.update(block)
        return port
    raise RuntimeError(f"no free ports {offsets} above a base below {ephemeral} on {host}")


@dataclass(frozen=True)
class Daemon:
    """One background process: its name, pid file and log."""

    name: str
    pid_file: Path
    log_file: Path

    def running_pid(self) -> int | None:
        """The pid of the process this daemon started, while it lives."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def start(self, command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
              kept: bool = False) -> subprocess.Popen:
        """Start `command` in a session of its own, its output appended to the log; remember its pid. `kept`: under
        include/daemons/keeper.py, which starts it again whenever it exits (the pid is then the keeper's)."""
        if kept:
            command = [sys.executable, str(KEEPER), "--", *command]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("a") as out:
            out.write(f"{START_MARK}{' '.join(command)}\n")
            out.flush()
            process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid_file.write_text(f"{process.pid}\n")
        return process

    def start_and_wait(self, command: list[str], answers: Callable[[], bool], error: type[Exception], *, what: str,
                       timeout: float, stop_timeout: float, poll: float, where: str = "",
                       env: dict[str, str] | None = None, cwd: Path | None = None,
                       group: bool = True) -> subprocess.Popen:
        """:meth:`start` `command`, then ask `answers()` every `poll` seconds until it does. `error` (one line naming
        `what`, `where` it was asked (" at <address>") and the log) when the process exits first, or when it does not
        answer within `timeout`: then it is stopped (:meth:`stop` with `stop_timeout` and `group`)."""
        process = self.start(command, env=env, cwd=cwd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise error(f"{what} exited at start (code {process.returncode}): {self.last_error()}; "
                            f"log: {self.log_file}")
            if answers():
                return process
            time.sleep(poll)
        self.stop(stop_timeout, group=group)
        raise error(f"{what} did not answer{where} within {timeout:.0f} s; log: {self.log_file}")

    def restarts(self) -> list[str]:
        """Its keeper's lines for each time it started the command again since this daemon was last started."""

        try:
            since_start = self.log_file.read_text(errors="replace").rsplit(START_MARK, 1)[-1]
        except FileNotFoundError:
            return []
        return [line for line in since_start.splitlines() if "keeper: pid " in line and RESTARTING in line]

    def restarted(self) -> bool:
        """A keeper started its command again since this daemon was last started (the command exited)."""
        return bool(self.restarts())

    def kept_pid(self) -> int | None:
        """Of a daemon started `kept`: the pid of the command its keeper runs now (None between two runs)."""
        pid = self.running_pid()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split() if pid else []
        except FileNotFoundError:
            return None
        return int(children[0]) if children else None

    def stop(self, timeout: float = 60.0, group: bool = True) -> int | None:
        """Stop the process (and, by default, its process group); the pid it had, or None if none ran."""
        pid = self.running_pid()
        if pid is not None:
            terminate(pid, self.name, timeout, group=group)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def stop_saying(self, stopped: str, none_ran: str, timeout: float = 60.0, group: bool = True) -> str:
        """:meth:`stop`, said in a line: `<stopped> (pid <pid>)`, or `<none_ran> (pid file <its path>)`."""
        pid = self.stop(timeout, group=group)
        return f"{none_ran} (pid file {self.pid_file})" if pid is None else f"{stopped} (pid {pid})"

    def last_error(self) -> str:
        """The last line of the log that reads like an error (else the last line)."""
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "no output"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "Error" in line or "Exception" in line or "FATAL" in line]
        return (errors or lines or ["no output"])[-1][:400]


@dataclass(frozen=True)
class DaemonFiles:
    """Where a server the project starts keeps its files: its `home`, with its log and pid file. Each server's class
    names them: `class BrokerFiles(DaemonFiles, daemon="the Kafka broker", log="broker.log", pid="broker.pid")`."""

    home: Path
    names: ClassVar[tuple[str, str, str]]  # the daemon's name, its log's and its pid file's

    def __init_subclass__(cls, daemon: str, log: str, pid: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.names = (daemon, log, pid)

    @property
    def log(self) -> Path:
        return self.home / self.names[1]

    @property
    def pid(self) -> Path:
        return self.home / self.names[2]

    @property
    def daemon(self) -> Daemon:
        return Daemon(self.names[0], self.pid, self.log)
