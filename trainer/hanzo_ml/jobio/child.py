"""The tool as a child process: its own process group, its output teed, the runner's signals passed on.

The child leads its own process group so that one signal reaches every process of the job (torchrun and its
workers alike) and so that a Ctrl-C in the runner's terminal reaches the runner only, which then stops the child
the graceful way. Output is copied, as it arrives, to the runner's stdout (`kubectl logs`) and to job.log.
"""
from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Mapping

READ_SIZE = 1 << 16
MAX_REPORT_BYTES = 64 << 20  # a Candle report is a few KB; anything near this is not a report


class JobLog:
    """job.log, appended to by the output pumps and the runner's own logger, one write at a time."""

    FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "ab")
        self.lock = threading.Lock()
        self.echo = True
        self.handler = _JobLogHandler(self)
        self.handler.setFormatter(logging.Formatter(self.FORMAT))

    def write(self, data: bytes, echo: bool) -> None:
        with self.lock:
            self.file.write(data)
            self.file.flush()
            if echo and self.echo:
                try:
                    sys.stdout.buffer.write(data)
                    sys.stdout.buffer.flush()
                except (OSError, ValueError):  # nobody reads our stdout any more: job.log still gets every byte
                    self.echo = False

    def close(self) -> None:
        with self.lock:
            self.file.close()


class _JobLogHandler(logging.Handler):
    """The runner's log records into job.log too (stderr already has them from the root handler)."""

    def __init__(self, job_log: JobLog):
        super().__init__()
        self.job_log = job_log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.job_log.write((self.format(record) + "\n").encode("utf-8", "replace"), echo=False)
        except Exception:  # noqa: BLE001 - a log line must never take the job down
            self.handleError(record)


class SignalForwarder:
    """SIGTERM and SIGINT become a SIGTERM to the child's process group: SIGTERM is the tools' graceful stop
    (the trainer finishes its step and writes an emergency checkpoint; torchrun passes it to its workers), and a
    Ctrl-C should stop a job the same way. A signal that arrives before the child starts is kept and sent as soon
    as it does."""

    def __init__(self):
        self.received: int | None = None
        self.child: subprocess.Popen | None = None
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame) -> None:
        self.received = signum
        self._forward()

    def attach(self, child: subprocess.Popen) -> None:
        self.child = child
        if self.received is not None:
            self._forward()

    def detach(self) -> None:
        self.child = None  # reaped: its pid (and group id) may belong to another process from now on

    def _forward(self) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def run_child(command: list[str], env: Mapping[str, str], cwd: Path, job_log: JobLog, signals: SignalForwarder,
              capture_stdout: bool) -> tuple[int, bytes]:
    """Run to the end; returns (exit code, captured stdout). capture_stdout (the Candle tool): stdout is its
    report, kept apart from the log; only stderr is teed. Otherwise stdout and stderr are teed together.
    A child ended by a signal reports 128 + the signal's number, as a shell does."""
    child = subprocess.Popen(command, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE if capture_stdout else subprocess.STDOUT,
                             start_new_session=True)
    signals.attach(child)
    report = io.BytesIO()
    if capture_stdout:
        pumps = [_pump(child.stderr, lambda data: job_log.write(data, echo=True)),
                 _pump(child.stdout, lambda data: _keep(report, data))]
    else:
        pumps = [_pump(child.stdout, lambda data: job_log.write(data, echo=True))]
    try:
        code = child.wait()
    finally:
        signals.detach()
    for pump in pumps:
        pump.join(timeout=30)  # a grandchild that outlives the child may hold the pipe open; do not wait forever
    return (128 - code if code < 0 else code), report.getvalue()


def _keep(buffer: io.BytesIO, data: bytes) -> None:
    if buffer.tell() < MAX_REPORT_BYTES:
        buffer.write(data)


def _pump(stream: IO[bytes], sink) -> threading.Thread:
    def copy() -> None:
        with stream:
            while chunk := stream.read1(READ_SIZE):
                sink(chunk)

    thread = threading.Thread(target=copy, name="child-output", daemon=True)
    thread.start()
    return thread
