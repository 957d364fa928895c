"""The hanzo-ml tracking client (spec 000 "Client Library"), shaped like mlflow's fluent API.

    import hanzo_ml
    hanzo_ml.set_tracking_uri("http://127.0.0.1:8057")      # or HANZO_ML_TRACKING_URI
    hanzo_ml.set_experiment("my-finetune")                    # created when absent
    with hanzo_ml.start_run(run_name="lr2e5", tags={"team": "nlp"}) as run:
        run.log_params({"learning_rate": 2e-5})
        run.log_metrics({"train/loss": 0.34}, step=100)       # batched in the background, never blocks
        run.log_artifact("checkpoint/step-100", "out/ckpt")   # a file or a directory, streamed
        run.register_model("my-model", "checkpoint/step-100", tags={"task": "qa"})

The run ends FINISHED, or FAILED when the block raises, or KILLED on KeyboardInterrupt, after its metrics are
flushed. `hanzo_ml.log_metrics(...)` and friends act on the active run. The token comes from
HANZO_ML_TRACKING_TOKEN or `set_tracking_uri(uri, token=...)`. Standard library only: importing this never
imports torch.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hanzo_ml.batching import MetricBatcher, metric_point
from hanzo_ml.transport import RetryPolicy, TrackingError, Transport, Upload

MAX_PARAMS_PER_REQUEST = 100  # the server's limit per POST /v1/runs/{id}/params
log = logging.getLogger("hanzo_ml.tracking")
TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")
RUN_STATUSES = ("RUNNING",) + TERMINAL_STATUSES

__all__ = ["Experiment", "Run", "TrackingError", "active_run", "end_run", "get_tracking_uri", "log_artifact",
           "log_metric", "log_metrics", "log_param", "log_params", "register_model", "set_experiment",
           "set_status", "set_tracking_uri", "start_run"]


@dataclass(frozen=True)
class Experiment:
    experiment_id: str
    name: str
    artifact_location: str
    lifecycle_stage: str


class Run:
    """One run on the server: parameters, batched metrics, artifacts, model registration and its status.

    A context manager: leaving the block flushes the metrics and ends the run FINISHED, FAILED (an exception)
    or KILLED (KeyboardInterrupt)."""

    def __init__(self, transport: Transport, info: dict, *, max_batch: int = 200, flush_interval_s: float = 2.0,
                 max_buffered: int = 100_000):
        self.transport = transport
        self.info = info
        self.id: str = info["id"]
        self.ended = False
        self._metrics = MetricBatcher(self._send_metrics, run_id=self.id, max_batch=max_batch,
                                      flush_interval_s=flush_interval_s, max_buffered=max_buffered)

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, name={self.name!r}, experiment_id={self.experiment_id!r})"

    @property
    def name(self) -> str:
        return self.info["name"]

    @property
    def experiment_id(self) -> str:
        return self.info["experiment_id"]

    @property
    def dropped_metrics(self) -> int:
        """Metric points that never reached the server (refused, unreachable, or the buffer was full)."""
        return self._metrics.dropped

    # ---- parameters and metrics ----

    def log_param(self, key: str, value: Any) -> None:
        self.log_params({key: value})

    def log_params(self, params: dict[str, Any]) -> None:
        """Parameters are immutable: the same value again is fine, a different one raises TrackingError."""
        if not isinstance(params, dict):
            raise TypeError(f"params: expected a dict of name -> value, got {type(params).__name__}")
        items = [(str(k), param_text(v)) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_REQUEST):
            self.transport.call("POST", f"/v1/runs/{self.id}/params",
                                {"params": dict(items[i:i + MAX_PARAMS_PER_REQUEST])})

    def log_metric(self, key: str, value: float, step: int | None = None, timestamp: int | None = None) -> None:
        self._metrics.add(metric_point(check_key(key), check_value(key, value), check_step(step), timestamp))

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Queued at once and sent in the background (batched, retried); never waits on the server."""
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics: expected a dict of name -> number, got {type(metrics).__name__}")
        now = int(time.time() * 1000)
        for key, value in metrics.items():
            self.log_metric(key, value, step, now)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Waits until every metric logged so far was sent (or given up on); False on timeout."""
        return self._metrics.flush(timeout_s)

    def _send_metrics(self, batch: list[dict]) -> None:
        self.transport.call("POST", f"/v1/runs/{self.id}/metrics", {"metrics": batch})

    # ---- artifacts and models ----

    def log_artifact(self, name_or_path: str, local_path: str | os.PathLike | None = None) -> list[dict]:
        """Uploads a file or a directory (every file under it) as artifact `name_or_path`, streaming each file.

        With one argument it is the local path and the artifact takes its base name, as in mlflow. Returns the
        server's {path, size_bytes, checksum} of every uploaded file."""
        if local_path is None:
            local, name = Path(name_or_path), Path(name_or_path).name
        else:
            local, name = Path(local_path), str(name_or_path).strip("/")
        if not name:
            raise ValueError("name_or_path: the artifact needs a name")
        if local.is_file():
            return [self._upload(name, local)]
        if local.is_dir():
            files = sorted(p for p in local.rglob("*") if p.is_file())
            return [self._upload(f"{name}/{p.relative_to(local).as_posix()}", p) for p in files]
        raise FileNotFoundError(f"local_path: {local} is neither a file nor a directory")

    def _upload(self, artifact_path: str, file: Path) -> dict:
        upload = Upload(open=lambda: open(file, "rb"), size=file.stat().st_size)
        return self.transport.call("POST", f"/v1/runs/{self.id}/artifacts", query={"path": artifact_path},
                                   upload=upload)

    def register_model(self, name: str, artifact_path: str, tags: dict[str, str] | None = None,
                       description: str | None = None, await_registration_for: float = 300.0) -> dict:
        """Registers this run's artifact `artifact_path` as a new version of model `name`; the version.

        The server copies the files under the version's own prefix after it answers (status
        `pending_registration`); this waits up to `await_registration_for` seconds until the version is `ready`
        (0: return at once) and raises TrackingError when the registration failed or did not finish in time."""
        body: dict[str, Any] = {"run_id": self.id, "artifact_path": artifact_path, "tags": dict(tags or {})}
        if description is not None:
            body["description"] = description
        path = f"/v1/models/{urllib.parse.quote(name, safe='')}/versions"
        version = self.transport.call("POST", path, body)
        deadline = time.monotonic() + await_registration_for
        while version.get("status") == "pending_registration" and await_registration_for > 0:
            if time.monotonic() > deadline:
                raise TrackingError(0, "TIMEOUT", f"version {version['version']} of model {name!r} is still being registered "
                                    f"after {await_registration_for:g}s", method="GET", url=f"{path}/{version['version']}")
            time.sleep(0.5)
            version = self.transport.call("GET", f"{path}/{version['version']}")
        if version.get("status") == "failed_registration":
            raise TrackingError(409, "FAILED_REGISTRATION", version.get("status_message") or "registration failed",
                                method="GET", url=f"{path}/{version['version']}")
        return version

    # ---- status ----

    def set_status(self, status: str, end_time: int | None = None) -> dict:
        """RUNNING, FINISHED, FAILED or KILLED; a terminal status ends the run now unless `end_time` (ms) says."""
        if status not in RUN_STATUSES:
            raise ValueError(f"status: expected one of {', '.join(RUN_STATUSES)}, got {status!r}")
        body: dict[str, Any] = {"status": status}
        if end_time is not None:
            body["end_time"] = int(end_time)
        self.info = self.transport.call("PATCH", f"/v1/runs/{self.id}/status", body)
        return self.info

    def refresh(self) -> dict:
        """The run as the server has it now: params, tags, latest metrics, artifacts, status."""
        self.info = self.transport.call("GET", f"/v1/runs/{self.id}")
        return self.info

    def end(self, status: str = "FINISHED", flush_timeout_s: float = 60.0) -> None:
        """Flushes the metrics, then sets the terminal status. Ending twice does nothing."""
        if self.ended:
            return
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"status: a run ends {', '.join(TERMINAL_STATUSES)}, got {status!r}")
        self.ended = True
        self._metrics.close(flush_timeout_s)
        self.set_status(status)
        _forget(self)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.end("FINISHED")
            return False
        try:
            self.end("KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED")
        except TrackingError as e:  # the block's own exception is the one to see
            log.warning("could not mark run %s ended: %s", self.id, e)
        return False


def param_text(value: Any) -> str:
    """Parameter values are stored as text, written as mlflow writes them (str())."""
    return value if isinstance(value, str) else str(value)


def check_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"metric key: expected a non-empty string, got {key!r}")
    return key


def check_value(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}")
    return float(value)


def check_step(step: int | None) -> int:
    if step is None:
        return 0
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step: expected a non-negative integer, got {step!r}")
    return step


# ---- the fluent API: one tracking URI, one active experiment and run per process ----

_lock = threading.RLock()
_state: dict[str, Any] = {"uri": None, "token": None, "experiment": None, "run": None}
_retry = RetryPolicy(attempts=7, initial_backoff_s=0.5, max_backoff_s=16.0, request_timeout_s=60.0)


def set_tracking_uri(uri: str, token: str | None = None) -> None:
    """The hanzo-ml API to log to (e.g. http://127.0.0.1:8057), and optionally its token."""
    Transport(uri)  # validates the URI now, not at the first call
    with _lock:
        _state["uri"], _state["token"], _state["experiment"] = uri.rstrip("/"), token, None


def get_tracking_uri() -> str:
    uri = _state["uri"] or os.environ.get("HANZO_ML_TRACKING_URI")
    if not uri:
        raise RuntimeError("no tracking URI: call hanzo_ml.set_tracking_uri(...) or set HANZO_ML_TRACKING_URI")
    return uri


def _transport() -> Transport:
    token = _state["token"] or os.environ.get("HANZO_ML_TRACKING_TOKEN") or None
    return Transport(get_tracking_uri(), token, _retry)


def set_experiment(name: str | None = None, experiment_id: str | None = None) -> Experiment:
    """Makes an experiment active for the runs that follow, creating it (by name) when absent."""
    if (name is None) == (experiment_id is None):
        raise ValueError("set_experiment: give exactly one of name or experiment_id")
    transport = _transport()
    if experiment_id is not None:
        found = transport.call("GET", f"/v1/experiments/{urllib.parse.quote(experiment_id, safe='')}")
        experiment = Experiment(found["id"], found["name"], found["artifact_location"], found["lifecycle_stage"])
    else:
        experiment = _experiment_by_name(transport, name) or _create_experiment(transport, name)
    if experiment.lifecycle_stage != "active":
        raise TrackingError(400, "INVALID_PARAMETER_VALUE",
                            f"experiment {experiment.name!r} is deleted; restore it or choose another",
                            method="GET", url=transport.base_uri)
    with _lock:
        _state["experiment"] = experiment
    return experiment


def _experiment_by_name(transport: Transport, name: str) -> Experiment | None:
    try:
        found = transport.call("GET", "/api/2.0/mlflow/experiments/get-by-name", query={"experiment_name": name})
    except TrackingError as e:
        if e.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    e = found["experiment"]
    return Experiment(e["experiment_id"], e["name"], e["artifact_location"], e["lifecycle_stage"])


def _create_experiment(transport: Transport, name: str) -> Experiment:
    try:
        made = transport.call("POST", "/v1/experiments", {"name": name})
    except TrackingError as e:
        if e.error_code == "RESOURCE_ALREADY_EXISTS":  # created by someone else in between
            return _experiment_by_name(transport, name)  # type: ignore[return-value]
        raise
    return Experiment(made["id"], made["name"], made["artifact_location"], made["lifecycle_stage"])


def start_run(run_name: str | None = None, tags: dict[str, str] | None = None, *, experiment_id: str | None = None,
              params: dict[str, Any] | None = None) -> Run:
    """Creates a run in the active experiment (or HANZO_ML_EXPERIMENT, or Default) and makes it active."""
    with _lock:
        current = _state["run"]
        if current is not None:
            raise RuntimeError(f"run {current.id} is already active; end it first (hanzo_ml.end_run())")
        transport = _transport()
        body: dict[str, Any] = {"tags": {str(k): str(v) for k, v in (tags or {}).items()},
                                "params": {str(k): param_text(v) for k, v in (params or {}).items()}}
        if run_name is not None:
            body["run_name"] = run_name
        experiment = _state["experiment"]
        if experiment_id is not None:
            body["experiment_id"] = experiment_id
        elif experiment is not None:
            body["experiment_id"] = experiment.experiment_id
        elif os.environ.get("HANZO_ML_EXPERIMENT"):
            body["experiment_name"] = os.environ["HANZO_ML_EXPERIMENT"]
        run = Run(transport, transport.call("POST", "/v1/runs", body))
        _state["run"] = run
        return run


def active_run() -> Run | None:
    return _state["run"]


def _forget(run: Run) -> None:
    with _lock:
        if _state["run"] is run:
            _state["run"] = None


def _run() -> Run:
    run = _state["run"]
    if run is None:
        raise RuntimeError("no active run: call hanzo_ml.start_run() first")
    return run


def end_run(status: str = "FINISHED") -> None:
    """Ends the active run (if any) after flushing its metrics."""
    run = _state["run"]
    if run is not None:
        run.end(status)


def log_param(key: str, value: Any) -> None:
    _run().log_param(key, value)


def log_params(params: dict[str, Any]) -> None:
    _run().log_params(params)


def log_metric(key: str, value: float, step: int | None = None) -> None:
    _run().log_metric(key, value, step)


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    _run().log_metrics(metrics, step)


def log_artifact(name_or_path: str, local_path: str | os.PathLike | None = None) -> list[dict]:
    return _run().log_artifact(name_or_path, local_path)


def register_model(name: str, artifact_path: str, tags: dict[str, str] | None = None,
                   description: str | None = None) -> dict:
    return _run().register_model(name, artifact_path, tags, description)


def set_status(status: str, end_time: int | None = None) -> dict:
    return _run().set_status(status, end_time)


@atexit.register
def _end_active_run_at_exit() -> None:
    """As in mlflow: a script that never ended its run finishes it on a normal exit."""
    run = _state["run"]
    if run is not None and not run.ended:
        try:
            run.end("FINISHED", flush_timeout_s=10.0)
        except TrackingError as e:
            log.warning("could not end run %s at exit: %s", run.id, e)
