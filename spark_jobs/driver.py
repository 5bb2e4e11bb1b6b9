"""The driver a job process runs in: its SparkSession (started once, when the first job gets past its checks) and
how it stops (SIGTERM / SIGINT stop the queries at a batch boundary; the JVM ignores them). Shared by a run of jobs
one after another (spark_jobs/job_process.py) and a group's queries side by side (spark_jobs/group_driver.py).
Whether a job may start is the one preflight's (include/checkpoints/preflight.py), which every starter calls."""

from __future__ import annotations

import faulthandler
import logging
import signal
import threading

from include.settings import Settings
from include.spark_session import get_spark

log = logging.getLogger("lakehouse")


def install_stop_handler() -> threading.Event:
    """SIGTERM / SIGINT set the returned event: the runner stops at the next batch boundary. SIGUSR1 writes the
    stack of every Python thread to the driver's log (its stderr): where a driver that seems stuck is."""
    stop = threading.Event()
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def request_stop(signum, _frame):
        log.info("received %s: stopping at the next batch boundary", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def shield_jvm_from_stop_signals(spark) -> None:
    """Make the driver JVM ignore SIGINT and SIGTERM, so that a signal to the whole process group (Ctrl-C,
    `timeout`, a task kill) stops the job through this process's handler at a batch boundary, instead of
    the JVM's shutdown hooks tearing Spark down under a running batch. SIGKILL still ends both."""
    jvm = spark.sparkContext._jvm
    for name in ("INT", "TERM"):
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), jvm.sun.misc.SignalHandler.SIG_IGN)


class SharedDriver:
    """The run's SparkSession, started when the first job gets past its checks (a refusal costs no JVM)."""

    def __init__(self, settings: Settings, jit: str = "tiered", live: bool = False):
        self.settings, self.jit = settings, jit  # jit: the JVM's compilers, when this process starts it
        self.live = live  # a live driver's session serves its metrics (include/spark_session.py)
        self.spark = None
        self.stop = threading.Event()  # replaced by the SIGTERM / SIGINT handler once the driver runs

    def session(self, app_name: str):
        if self.spark is None:
            self.spark = get_spark(self.settings, app_name=app_name, jit=self.jit, live=self.live)
            shield_jvm_from_stop_signals(self.spark)
            self.stop = install_stop_handler()  # after the SparkContext, whose own SIGINT handler it replaces
        return self.spark
