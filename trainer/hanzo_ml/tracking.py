"""The trainer's metric logging to the MLflow-compatible tracking API (`POST /api/2.0/mlflow/runs/log-batch`).

The control plane creates the run and hands the job its id, the tracking URI and a token
(HANZO_ML_TRACKING_TOKEN). Batching and retries are the Python client's (`hanzo_ml.batching`,
`hanzo_ml.transport`): `log_metric` never blocks on the network, the server ignores an exact duplicate point
(key, timestamp, step, value), so a retried batch that had in fact arrived is harmless, and a batch still failing
after the last attempt is dropped with a warning.
"""
from __future__ import annotations

import os
import time

from hanzo_ml.batching import SERVER_MAX_METRICS_PER_BATCH, MetricBatcher, json_double, metric_point
from hanzo_ml.transport import RETRYABLE_STATUS, RetryPolicy, Transport, parse_retry_after

__all__ = ["LOG_BATCH_PATH", "MetricsClient", "NullMetricsClient", "RetryPolicy", "metrics_client", "metric_point",
           "json_double", "parse_retry_after", "RETRYABLE_STATUS", "SERVER_MAX_METRICS_PER_BATCH"]

LOG_BATCH_PATH = "/api/2.0/mlflow/runs/log-batch"


class MetricsClient:
    """Buffers metric points of one run and ships them to `tracking_uri` in the background."""

    def __init__(self, tracking_uri: str, run_id: str, *, max_batch: int = 50, flush_interval_s: float = 3.0,
                 max_buffered: int = 10_000, retry: RetryPolicy = RetryPolicy()):
        self.transport = Transport(tracking_uri, os.environ.get("HANZO_ML_TRACKING_TOKEN") or None, retry)
        self.url = self.transport.url(LOG_BATCH_PATH)
        self.run_id = run_id
        self._batcher = MetricBatcher(self._send, run_id=run_id, max_batch=max_batch,
                                      flush_interval_s=flush_interval_s, max_buffered=max_buffered)

    def _send(self, batch: list[dict]) -> None:
        self.transport.call("POST", LOG_BATCH_PATH, {"run_id": self.run_id, "metrics": batch})

    @property
    def dropped(self) -> int:
        return self._batcher.dropped

    # ---- called by the training loop (never blocks on the network) ----

    def log_metric(self, key: str, value: float, step: int, timestamp_ms: int | None = None) -> None:
        self._batcher.add(metric_point(key, value, step, timestamp_ms))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        timestamp_ms = int(time.time() * 1000)
        for key, value in metrics.items():
            self.log_metric(key, value, step, timestamp_ms)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Send everything logged so far; True when it was sent (or given up on) within the timeout."""
        return self._batcher.flush(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        self._batcher.close(timeout_s)


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
