"""The metrics client against a real local HTTP server: batching, retries, giving up, never blocking."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hanzo_ml.tracking import MetricsClient, RetryPolicy
from hanzo_ml.transport import TrackingError, Transport, Upload
from helpers import load_spec_dict, train_spec

FAST_RETRY = RetryPolicy(attempts=4, initial_backoff_s=0.01, max_backoff_s=0.05, request_timeout_s=5.0)


class TrackingServer:
    """Records every log-batch request; `script` lists what to do with the next requests:
    an HTTP status to answer, "drop" to close the connection unanswered, or ("sleep", seconds)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw) if self.headers.get("Content-Type") == "application/json" else raw
                action = server.script.pop(0) if server.script else 200
                server.requests.append({"path": self.path, "body": body, "action": action,
                                        "authorization": self.headers.get("Authorization"), "at": time.monotonic()})
                if action == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                    action = 200
                headers = {}
                if isinstance(action, tuple):  # (status, body bytes, headers)
                    action, payload, headers = action
                else:
                    payload = b"{}" if action == 200 else b'{"error_code": "X", "message": "no"}'
                self.send_response(action)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def delivered(self) -> list[dict]:
        """Points from the requests that were answered 200 (at once or after a sleep)."""
        return [m for r in self.requests if r["action"] == 200 or isinstance(r["action"], tuple)
                for m in r["body"]["metrics"]]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = TrackingServer()
    yield running
    running.close()


def test_points_are_sent_in_batches_of_max_batch(server):
    client = MetricsClient(server.uri, "run1", max_batch=50, flush_interval_s=60, retry=FAST_RETRY)
    for step in range(120):
        client.log_metric("train/loss", step / 10, step, timestamp_ms=1_700_000_000_000 + step)
    assert client.flush(timeout_s=10)
    client.close()
    assert [len(r["body"]["metrics"]) for r in server.requests] == [50, 50, 20]
    assert {r["path"] for r in server.requests} == {"/api/2.0/mlflow/runs/log-batch"}
    assert {r["body"]["run_id"] for r in server.requests} == {"run1"}
    assert server.delivered()[7] == {"key": "train/loss", "value": 0.7, "timestamp": 1_700_000_000_007, "step": 7}


def test_a_partial_batch_goes_out_after_the_flush_interval_without_a_flush(server):
    client = MetricsClient(server.uri, "run1", max_batch=50, flush_interval_s=0.2, retry=FAST_RETRY)
    client.log_metrics({"train/loss": 1.0, "train/lr": 0.1}, step=1)
    deadline = time.monotonic() + 5
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [m["key"] for m in server.delivered()] == ["train/loss", "train/lr"]
    client.close()


def test_server_errors_and_dropped_connections_are_retried_until_delivered(server):
    server.script = [503, "drop", 500]
    client = MetricsClient(server.uri, "run1", retry=FAST_RETRY)
    client.log_metrics({"train/loss": 2.5}, step=3)
    assert client.flush(timeout_s=10)
    client.close()
    assert [r["action"] for r in server.requests] == [503, "drop", 500, 200]
    assert [m["value"] for m in server.delivered()] == [2.5]


def test_after_the_last_attempt_the_batch_is_dropped_with_a_warning(server, caplog):
    server.script = [500] * 10
    client = MetricsClient(server.uri, "run1", retry=FAST_RETRY)
    client.log_metrics({"train/loss": 1.0, "train/lr": 0.5}, step=1)
    assert client.flush(timeout_s=10)  # handled (given up on), so the trainer moves on
    client.close()
    assert len(server.requests) == FAST_RETRY.attempts
    assert "dropped 2 metric points for run run1 after 4 attempt(s)" in caplog.text


def test_a_rejected_batch_is_not_retried(server, caplog):
    server.script = [400]
    client = MetricsClient(server.uri, "run1", retry=FAST_RETRY)
    client.log_metrics({"bad key?": 1.0}, step=1)
    client.close()
    assert len(server.requests) == 1
    assert "rejected a metric batch: HTTP 400" in caplog.text


def test_an_unreachable_server_costs_the_trainer_nothing(caplog):
    client = MetricsClient("http://127.0.0.1:9", "run1", retry=FAST_RETRY)  # port 9: nothing listens
    started = time.monotonic()
    client.log_metrics({"train/loss": 1.0}, step=1)
    assert time.monotonic() - started < 0.05
    client.close(timeout_s=10)
    assert "dropped 1 metric points" in caplog.text


def test_a_full_buffer_drops_new_points_instead_of_blocking(server):
    server.script = [("sleep", 1.0)]
    client = MetricsClient(server.uri, "run1", max_batch=5, max_buffered=10, retry=FAST_RETRY)
    for step in range(5):
        client.log_metric("a", 1.0, step)  # a full batch: the sender takes it and waits on the slow server
    time.sleep(0.2)
    started = time.monotonic()
    for step in range(5, 20):
        client.log_metric("a", 1.0, step)
    assert time.monotonic() - started < 0.05
    assert client.dropped == 5
    client.close()
    assert len(server.delivered()) == 15


def test_nan_and_infinity_travel_as_mlflow_strings(server):
    client = MetricsClient(server.uri, "run1", retry=FAST_RETRY)
    client.log_metrics({"a": float("nan"), "b": float("inf"), "c": float("-inf")}, step=0)
    client.close()
    assert [m["value"] for m in server.delivered()] == ["NaN", "Infinity", "-Infinity"]


def test_the_job_token_travels_as_a_bearer_header(server, monkeypatch):
    monkeypatch.setenv("HANZO_ML_TRACKING_TOKEN", "s3cret")
    client = MetricsClient(server.uri, "run1", retry=FAST_RETRY)
    client.log_metrics({"a": 1.0}, step=0)
    client.close()
    assert server.requests[0]["authorization"] == "Bearer s3cret"


def test_a_refused_call_raises_the_servers_error_code_and_message_at_once(server):
    server.script = [(404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "run r1 does not exist", '
                           b'"request_id": "req-7"}', {})]
    with pytest.raises(TrackingError) as caught:
        Transport(server.uri, retry=FAST_RETRY).call("POST", "/v1/runs/r1/params", {"params": {"a": "1"}})
    error = caught.value
    assert (error.status, error.error_code, error.message, error.request_id) == (
        404, "RESOURCE_DOES_NOT_EXIST", "run r1 does not exist", "req-7")
    assert str(error).startswith("RESOURCE_DOES_NOT_EXIST: run r1 does not exist (POST http://")
    assert len(server.requests) == 1


def test_an_error_body_that_is_not_json_is_surfaced_as_text(server):
    server.script = [(400, b"bad gateway config", {})]
    with pytest.raises(TrackingError, match="HTTP_ERROR: bad gateway config"):
        Transport(server.uri, retry=FAST_RETRY).call("POST", "/v1/runs", {})


def test_a_429_is_retried_after_the_servers_retry_after(server):
    server.script = [(429, b'{"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"}', {"Retry-After": "0.3"})]
    assert Transport(server.uri, retry=FAST_RETRY).call("POST", "/v1/runs", {"x": 1}) == {}
    first, second = server.requests
    assert second["at"] - first["at"] >= 0.3


def test_an_upload_streams_the_file_and_is_sent_again_in_full_on_retry(server, tmp_path):
    data = bytes(range(256)) * 4000
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    server.script = [503]
    upload = Upload(open=lambda: open(path, "rb"), size=len(data))
    Transport(server.uri, retry=FAST_RETRY).call("POST", "/v1/runs/r1/artifacts", query={"path": "a/b c.bin"},
                                                  upload=upload)
    assert [r["body"] for r in server.requests] == [data, data]
    assert server.requests[1]["path"] == "/v1/runs/r1/artifacts?path=a%2Fb+c.bin"


def test_after_the_last_attempt_the_error_says_how_many_attempts_were_made(server):
    server.script = [502] * 10
    with pytest.raises(TrackingError, match=r"HTTP 502 after 4 attempt\(s\)"):
        Transport(server.uri, retry=FAST_RETRY).call("POST", "/v1/runs", {})
    assert len(server.requests) == FAST_RETRY.attempts


def test_training_reports_its_metrics_to_the_tracking_server(server, tmp_path, tiny_base_dir, chat_files):
    import hanzo_ml.lora as lora

    spec = train_spec(tmp_path, tiny_base_dir, chat_files, tracking_uri=server.uri,
                      hyperparameters={"max_steps": 4})
    lora.train(load_spec_dict(spec, tmp_path), tmp_path / "job.json", tmp_path / "work")
    points = server.delivered()
    assert sorted(p["step"] for p in points if p["key"] == "train/loss") == [1, 2, 3, 4]
    assert sorted(p["step"] for p in points if p["key"] == "eval/loss") == [2, 4]
    assert {p["key"] for p in points} == {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_second",
                                          "train/peak_memory_mb", "eval/loss"}
    assert all(isinstance(p["timestamp"], int) for p in points)
