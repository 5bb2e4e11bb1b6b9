"""Keeps one part of `lakehouse cluster` running, as a container's `restart: always` does.

Airflow's scheduler exits when its metadatabase goes away (a PostgreSQL restart, a failover) and relies on its
supervisor to start it again. `python keeper.py -- <command>` runs the command and starts it again each time it
exits, after 1, 2, 4 ... 30 s, until the keeper's process group is sent SIGTERM or SIGINT (`lakehouse cluster
down`): it then waits for its command to exit and exits with its code. Each restart is a line in its log, by which
`lakehouse cluster up` fails a part that exits before it answers (include.daemons `Daemon.restarted`).

Run as a script, it imports nothing from the project: it must start whatever the project's state.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time

MAX_DELAY_SECONDS = 30.0
STEADY_SECONDS = 120.0  # a run this long resets the delay to 1 s

log = logging.getLogger("lakehouse.keeper")
EXITED = "exited with code"
RESTARTING = "starting it again"


class Stop:
    """Set by the signal handler. (Not a threading.Event: setting one from a handler can deadlock on its lock.)"""

    requested = False

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; whether a stop was requested."""
        deadline = time.monotonic() + seconds
        while not self.requested and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.requested


def keep(command: list[str], stopping: Stop) -> int:
    """Run `command` until `stopping` is set, starting it again whenever it exits; its last exit code."""
    delay, restarts = 1.0, 0
    while not stopping.requested:
        started = time.monotonic()
        child = subprocess.Popen(command)  # in the keeper's process group: a signal to the group reaches it
        code = child.wait()
        ran = time.monotonic() - started
        if stopping.requested:
            log.info("stopped: pid %s %s %s", child.pid, EXITED, code)
            return code
        if ran >= STEADY_SECONDS:
            delay = 1.0
        restarts += 1
        # a warning, not an error: `lakehouse cluster up` reports the command's own last error line
        log.warning("pid %s %s %s after %.0f s: %s in %.0f s (restart %d)", child.pid, EXITED, code, ran, RESTARTING,
                    delay, restarts)
        if stopping.wait(delay):
            return code
        delay = min(delay * 2, MAX_DELAY_SECONDS)
    return 0


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s [%(levelname)s] keeper: %(message)s")
    if argv[:1] != ["--"] or len(argv) < 2:
        sys.stderr.write("usage: keeper.py -- <command> [args...]\n")
        return 2
    stopping = Stop()

    def stop(*_) -> None:  # the signal went to the whole group, the command too: it finishes its own shutdown
        stopping.requested = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    return keep(argv[1:], stopping)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
