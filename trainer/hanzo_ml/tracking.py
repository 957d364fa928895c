"""Metric logging to the MLflow-compatible tracking API (`POST /api/2.0/mlflow/runs/log-batch`).

Training must never wait on the tracking server: `log_metric` only appends to a bounded in-memory buffer, and a
background thread sends batches (when `max_batch` points are waiting, every `flush_interval` seconds, and on
`flush()`), retrying connection errors, 408, 429 and 5xx with exponential backoff. The server ignores an exact
duplicate point (key, timestamp, step, value), so a retried batch that had in fact arrived is harmless. After the
last attempt a batch is dropped with a warning on stderr; so are points that arrive while the buffer is full.
"""
from __future__ import annotations

import collections
import json
import logging
import math
import threading
import time
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

log = logging.getLogger(__name__)

LOG_BATCH_PATH = "/api/2.0/mlflow/runs/log-batch"
SERVER_MAX_METRICS_PER_BATCH = 1000  # the server rejects larger batches
RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    request_timeout_s: float = 10.0


def metric_point(key: str, value: float, step: int, timestamp_ms: int | None = None) -> dict:
    return {"key": key, "value": json_double(value), "timestamp": timestamp_ms or int(time.time() * 1000),
            "step": int(step)}


def json_double(value: float):
    """The MLflow wire format carries NaN and infinities as strings (plain JSON has no such numbers)."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


class MetricsClient:
    """Buffers metric points of one run and ships them to `tracking_uri` in the background."""

    def __init__(self, tracking_uri: str, run_id: str, *, max_batch: int = 50, flush_interval_s: float = 3.0,
                 max_buffered: int = 10_000, retry: RetryPolicy = RetryPolicy()):
        self.url = tracking_uri.rstrip("/") + LOG_BATCH_PATH
        self.run_id = run_id
        self.max_batch = min(max_batch, SERVER_MAX_METRICS_PER_BATCH)
        self.flush_interval_s = flush_interval_s
        self.max_buffered = max_buffered
        self.retry = retry
        self._buffer: collections.deque[dict] = collections.deque()
        self._cond = threading.Condition()
        self._accepted = 0   # points taken into the buffer, ever
        self._handled = 0    # points sent or given up on, ever
        self._oldest_at = time.monotonic()
        self._flush_requested = False
        self._closed = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="metrics-client", daemon=True)
        self._thread.start()

    # ---- called by the training loop (never blocks on the network) ----

    def log_metric(self, key: str, value: float, step: int, timestamp_ms: int | None = None) -> None:
        with self._cond:
            if len(self._buffer) >= self.max_buffered:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 1000 == 0:
                    log.warning("metrics buffer full (%d points): dropped %d points so far", self.max_buffered,
                                self.dropped)
                return
            if not self._buffer:
                self._oldest_at = time.monotonic()
            self._buffer.append(metric_point(key, value, step, timestamp_ms))
            self._accepted += 1
            if len(self._buffer) == 1 or len(self._buffer) >= self.max_batch:
                self._cond.notify_all()

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        timestamp_ms = int(time.time() * 1000)
        for key, value in metrics.items():
            self.log_metric(key, value, step, timestamp_ms)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send everything logged so far; True when it was sent (or given up on) within the timeout."""
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

    def close(self, timeout_s: float = 30.0) -> None:
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=1.0)

    # ---- the sender thread ----

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._send_with_retries(batch)
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

    def _send_with_retries(self, batch: list[dict]) -> None:
        body = json.dumps({"run_id": self.run_id, "metrics": batch}).encode()
        delay = self.retry.initial_backoff_s
        for attempt in range(1, self.retry.attempts + 1):
            outcome, retry_after = self._post(body)
            if outcome == "ok":
                return
            if outcome == "rejected" or attempt == self.retry.attempts:
                break
            time.sleep(min(self.retry.max_backoff_s, max(delay, retry_after or 0.0)))
            delay *= 2
        log.warning("dropped %d metric points for run %s after %d attempt(s) to %s", len(batch), self.run_id,
                    attempt, self.url)

    def _post(self, body: bytes) -> tuple[str, float | None]:
        """('ok' | 'retry' | 'rejected', Retry-After seconds if the server sent one)."""
        request = urllib.request.Request(self.url, data=body, method="POST", headers=request_headers())
        try:
            with urllib.request.urlopen(request, timeout=self.retry.request_timeout_s) as response:
                response.read()
            return "ok", None
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            if e.code in RETRYABLE_STATUS:
                log.info("tracking server answered %d, retrying", e.code)
                return "retry", parse_retry_after(e.headers.get("Retry-After"))
            log.warning("tracking server rejected a metric batch: HTTP %d %s", e.code, detail)
            return "rejected", None
        except (urllib.error.URLError, OSError) as e:  # refused, reset, DNS, timeout
            log.info("tracking server unreachable (%s), retrying", getattr(e, "reason", e))
            return "retry", None


def parse_retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class NullMetricsClient:
    """tracking_uri is null: metrics stay in progress.json and result.json only."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def flush(self, timeout_s: float = 10.0) -> bool:
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        pass


def metrics_client(tracking_uri: str | None, run_id: str):
    return MetricsClient(tracking_uri, run_id) if tracking_uri else NullMetricsClient()


def request_headers() -> dict[str, str]:
    """JSON, plus the bearer token the control plane hands the job (HANZO_ML_TRACKING_TOKEN), when set."""
    headers = {"Content-Type": "application/json"}
    token = os.environ.get("HANZO_ML_TRACKING_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
