"""Metric points of one run, buffered in memory and shipped in batches by a background thread.

Training must never wait on the tracking server: `add` only appends to a bounded buffer, and the sender thread
sends a batch when `max_batch` points are waiting, when the oldest point has waited `flush_interval_s`, and on
`flush()`. `send` (one HTTP call, retried by the transport) raises `TrackingError` on failure: the batch is then
dropped with a warning, and so are points that arrive while the buffer is full. Both are counted in `dropped`.
"""
from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Callable

from hanzo_ml.transport import TrackingError

log = logging.getLogger("hanzo_ml.tracking")

SERVER_MAX_METRICS_PER_BATCH = 1000  # the server rejects larger batches


def metric_point(key: str, value: float, step: int, timestamp_ms: int | None = None) -> dict:
    return {"key": key, "value": json_double(value), "timestamp": timestamp_ms or int(time.time() * 1000),
            "step": int(step)}


def json_double(value: float):
    """NaN and infinities travel as the strings MLflow uses (plain JSON has no such numbers)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


class MetricBatcher:
    """Buffers metric points and hands them to `send` in batches from a background thread."""

    def __init__(self, send: Callable[[list[dict]], object], *, run_id: str, max_batch: int = 50,
                 flush_interval_s: float = 3.0, max_buffered: int = 10_000):
        self.send = send
        self.run_id = run_id
        self.max_batch = max(1, min(max_batch, SERVER_MAX_METRICS_PER_BATCH))
        self.flush_interval_s = flush_interval_s
        self.max_buffered = max_buffered
        self._buffer: collections.deque[dict] = collections.deque()
        self._cond = threading.Condition()
        self._accepted = 0   # points taken into the buffer, ever
        self._handled = 0    # points sent or given up on, ever
        self._oldest_at = time.monotonic()
        self._flush_requested = False
        self._closed = False
        self.dropped = 0
        self.last_error: TrackingError | None = None
        self._thread = threading.Thread(target=self._run, name=f"metrics-{run_id}", daemon=True)
        self._thread.start()

    # ---- called by the training loop (never blocks on the network) ----

    def add(self, point: dict) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError(f"run {self.run_id} has ended: its metrics can no longer be logged")
            if len(self._buffer) >= self.max_buffered:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.warning("metrics buffer full (%d points): dropped %d points so far", self.max_buffered,
                                self.dropped)
                return
            if not self._buffer:
                self._oldest_at = time.monotonic()
            self._buffer.append(point)
            self._accepted += 1
            if len(self._buffer) == 1 or len(self._buffer) >= self.max_batch:
                self._cond.notify_all()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send everything added so far; True when it was sent (or given up on) within the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self._accepted
            self._flush_requested = True
            self._cond.notify_all()
            while self._handled < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("metrics flush timed out with %d points still unsent", target - self._handled)
                    return False
                self._cond.wait(remaining)
        return True

    def close(self, timeout_s: float = 30.0) -> bool:
        """Flush, then stop the sender thread; later `add` calls raise."""
        sent = self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=1.0)
        return sent

    # ---- the sender thread ----

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._deliver(batch)
            with self._cond:
                self._handled += len(batch)
                self._cond.notify_all()

    def _next_batch(self) -> list[dict] | None:
        """Wait until a batch is due (full, its oldest point waited flush_interval_s, flush requested, closing),
        then take it. None once closed with nothing left."""
        with self._cond:
            while True:
                if not self._buffer:
                    if self._closed:
                        return None
                    self._cond.wait()  # the first point, a flush or close wakes us
                    continue
                wait_s = self._oldest_at + self.flush_interval_s - time.monotonic()
                if len(self._buffer) >= self.max_batch or self._flush_requested or self._closed or wait_s <= 0:
                    break
                self._cond.wait(wait_s)
            batch = [self._buffer.popleft() for _ in range(min(self.max_batch, len(self._buffer)))]
            self._oldest_at = time.monotonic()
            if not self._buffer:
                self._flush_requested = False
            return batch

    def _deliver(self, batch: list[dict]) -> None:
        try:
            self.send(batch)
        except TrackingError as e:
            self.last_error = e
            with self._cond:
                self.dropped += len(batch)
            if e.retryable:
                log.warning("dropped %d metric points for run %s after %d attempt(s) to %s: %s", len(batch),
                            self.run_id, e.attempts, e.url, e.message)
            else:
                log.warning("tracking server rejected a metric batch: HTTP %d %s: %s (dropped %d points for run %s)",
                            e.status, e.error_code, e.message, len(batch), self.run_id)
        except Exception:  # a bug must not kill the sender thread and stall every later flush
            log.exception("sending %d metric points for run %s failed", len(batch), self.run_id)
            with self._cond:
                self.dropped += len(batch)
