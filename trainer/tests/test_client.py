"""The hanzo_ml tracking client against a real hanzo-ml server (`bin/hanzo-ml dev` in a temporary HANZO_ML_HOME):
runs, immutable params, batched metrics, streamed artifacts, model registration, and how a run ends."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import hanzo_ml
from hanzo_ml.tracking import MetricsClient

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hanzo-ml-dev-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(uri: str, path: str, token: str = TOKEN):
    request = urllib.request.Request(uri + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The embedded stack on free ports (Temporal headless), stopped with SIGTERM like Ctrl-C."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the hanzo-ml server cannot start")
    home = tmp_path_factory.mktemp("hanzo-ml-home")
    port = free_port()
    env = {**os.environ, "HANZO_ML_HOME": str(home), "HANZO_ML_SERVER_PORT": str(port),
           "HANZO_ML_TEMPORAL_PORT": str(free_port()), "HANZO_ML_TEMPORAL_UI_PORT": "0",
           "HANZO_ML_LOGGING_LEVEL": "warn"}
    log = open(home / "dev.log", "wb")
    process = subprocess.Popen([str(REPO / "bin" / "hanzo-ml"), "dev"], cwd=REPO, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        try:
            get(uri, "/v1/models")
            break
        except (urllib.error.URLError, OSError):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"hanzo-ml dev did not start:\n{(home / 'dev.log').read_text()[-3000:]}")
            time.sleep(0.5)
    yield uri
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture
def tracking(server, monkeypatch):
    """A fresh fluent state pointing at the server, with the token from the environment."""
    monkeypatch.setenv("HANZO_ML_TRACKING_TOKEN", TOKEN)
    monkeypatch.delenv("HANZO_ML_EXPERIMENT", raising=False)
    hanzo_ml.end_run()
    hanzo_ml.set_tracking_uri(server)
    yield server
    hanzo_ml.end_run()


def test_a_run_logs_params_metrics_artifacts_and_ends_finished(tracking, tmp_path):
    experiment = hanzo_ml.set_experiment("client-e2e")
    assert hanzo_ml.set_experiment("client-e2e").experiment_id == experiment.experiment_id
    checkpoint = tmp_path / "ckpt"
    (checkpoint / "nested").mkdir(parents=True)
    (checkpoint / "adapter.bin").write_bytes(os.urandom(300_000))
    (checkpoint / "nested" / "state.json").write_text('{"step": 3}')
    config = tmp_path / "config.yaml"
    config.write_text("lr: 2e-5\n")

    with hanzo_ml.start_run(run_name="qlora-lr2e5-r64", tags={"team": "nlp"}) as run:
        assert hanzo_ml.active_run() is run
        run.log_params({"model": "tiny", "learning_rate": 2e-5, "lora_rank": 64})
        for step in range(1, 31):
            run.log_metrics({"train/loss": 3.0 / step, "gpu/memory_used_gb": 1.5}, step=step)
        run.log_metric("eval/perplexity", float("nan"), step=30)
        uploaded = run.log_artifact("checkpoint/step-3", checkpoint)
        assert [u["path"] for u in uploaded] == ["checkpoint/step-3/adapter.bin", "checkpoint/step-3/nested/state.json"]
        assert uploaded[0]["size_bytes"] == 300_000
        assert run.log_artifact(str(config))[0]["path"] == "config.yaml"

    assert hanzo_ml.active_run() is None
    got = get(tracking, f"/v1/runs/{run.id}")
    assert got["experiment_id"] == experiment.experiment_id
    assert got["status"] == "completed" and got["end_time"] is not None
    assert got["name"] == "qlora-lr2e5-r64"
    assert got["tags"]["team"] == "nlp"
    assert got["params"] == {"model": "tiny", "learning_rate": "2e-05", "lora_rank": "64"}
    assert got["metrics"]["train/loss"]["value"] == pytest.approx(0.1)
    assert got["metrics"]["train/loss"]["step"] == 30
    assert got["metrics"]["eval/perplexity"]["value"] == "NaN"
    assert {a["key"] for a in got["artifacts"]} == {"checkpoint/step-3/adapter.bin",
                                                    "checkpoint/step-3/nested/state.json", "config.yaml"}
    history = get(tracking, f"/v1/runs/{run.id}/metrics?key=train/loss")
    assert [p["step"] for p in history["metrics"]] == list(range(1, 31))
    assert run.dropped_metrics == 0


def test_register_model_creates_a_version_from_a_run_artifact(tracking, tmp_path):
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * 1024)
    with hanzo_ml.start_run(run_name="to-register") as run:
        run.log_artifact("checkpoint/step-final", weights)
        version = run.register_model("client-model", "checkpoint/step-final", tags={"task": "qa"})
    assert version["name"] == "client-model"
    assert version["run_id"] == run.id
    assert version["tags"] == {"task": "qa"}
    assert version["source"].endswith(f"{run.id}/artifacts/checkpoint/step-final")
    # The client waited while the server copied the files under the version's prefix.
    assert version["status"] == "ready" and version["formats"] == ["safetensors"]
    versions = get(tracking, "/v1/models/client-model/versions")
    assert run.id in json.dumps(versions)


def test_an_exception_ends_the_run_failed_after_its_metrics_are_flushed(tracking):
    with pytest.raises(ValueError, match="diverged"):
        with hanzo_ml.start_run(run_name="will-fail") as run:
            run.log_metrics({"train/loss": 9.5}, step=7)
            raise ValueError("loss diverged")
    got = get(tracking, f"/v1/runs/{run.id}")
    assert got["status"] == "failed"
    assert got["metrics"]["train/loss"] == {"value": 9.5, "step": 7, "timestamp": got["metrics"]["train/loss"]["timestamp"]}


def test_a_keyboard_interrupt_ends_the_run_killed(tracking):
    with pytest.raises(KeyboardInterrupt):
        with hanzo_ml.start_run(run_name="interrupted") as run:
            run.log_metrics({"train/loss": 1.0}, step=1)
            raise KeyboardInterrupt
    got = get(tracking, f"/v1/runs/{run.id}")
    assert got["status"] == "cancelled"
    assert got["metrics"]["train/loss"]["step"] == 1


def test_params_are_immutable_and_a_changed_value_raises_the_server_error(tracking):
    with hanzo_ml.start_run() as run:
        run.log_params({"lr": 0.1})
        run.log_params({"lr": 0.1})  # the same value again is a no-op
        with pytest.raises(hanzo_ml.TrackingError) as caught:
            run.log_param("lr", 0.2)
    error = caught.value
    assert (error.status, error.error_code) == (400, "INVALID_PARAMETER_VALUE")
    assert "params.lr" in error.message and "'0.1'" in error.message and "'0.2'" in error.message
    assert "INVALID_PARAMETER_VALUE" in str(error)


def test_more_than_a_hundred_params_are_sent_in_several_requests(tracking):
    with hanzo_ml.start_run() as run:
        run.log_params({f"p{i:03d}": i for i in range(250)})
    assert len(get(tracking, f"/v1/runs/{run.id}")["params"]) == 250


def test_the_module_level_functions_act_on_the_active_run(tracking):
    hanzo_ml.set_experiment("client-fluent")
    run = hanzo_ml.start_run(run_name="fluent", params={"seed": 1})
    with pytest.raises(RuntimeError, match="already active"):
        hanzo_ml.start_run()
    hanzo_ml.log_param("batch_size", 4)
    hanzo_ml.log_params({"epochs": 2})
    hanzo_ml.log_metric("acc", 0.5, step=1)
    hanzo_ml.log_metrics({"acc": 0.75}, step=2)
    assert hanzo_ml.set_status("RUNNING")["status"] == "running"
    hanzo_ml.end_run()
    with pytest.raises(RuntimeError, match="no active run"):
        hanzo_ml.log_metric("acc", 1.0)
    got = get(tracking, f"/v1/runs/{run.id}")
    assert got["params"] == {"seed": "1", "batch_size": "4", "epochs": "2"}
    assert got["metrics"]["acc"]["value"] == 0.75
    assert got["status"] == "completed"


def test_the_experiment_comes_from_hanzo_ml_experiment_when_none_was_set(tracking, monkeypatch):
    monkeypatch.setenv("HANZO_ML_EXPERIMENT", "from-the-environment")
    with hanzo_ml.start_run() as run:
        pass
    assert run.experiment_id == hanzo_ml.set_experiment("from-the-environment").experiment_id


def test_a_wrong_token_is_an_unauthenticated_error_naming_the_call(server):
    hanzo_ml.set_tracking_uri(server, token="not-a-token")
    try:
        with pytest.raises(hanzo_ml.TrackingError) as caught:
            hanzo_ml.start_run()
    finally:
        hanzo_ml.set_tracking_uri(server)
    assert (caught.value.status, caught.value.error_code) == (401, "UNAUTHENTICATED")
    assert "POST " in str(caught.value) and "/v1/runs" in str(caught.value)


def test_bad_arguments_fail_before_any_request(tracking):
    with pytest.raises(ValueError, match="tracking URI"):
        hanzo_ml.set_tracking_uri("127.0.0.1:8057")
    with hanzo_ml.start_run() as run:
        with pytest.raises(ValueError, match="step"):
            run.log_metric("loss", 1.0, step=-1)
        with pytest.raises(TypeError, match="expected a number"):
            run.log_metric("loss", "high")
        with pytest.raises(FileNotFoundError, match="local_path"):
            run.log_artifact("x", "/does/not/exist")
        with pytest.raises(ValueError, match="status"):
            run.set_status("DONE")


def test_a_refused_metric_batch_is_counted_as_dropped_not_raised_in_the_training_loop(tracking):
    with hanzo_ml.start_run() as run:
        run.log_metric("loss (train)", 1.0, step=1)  # the server refuses the key
        assert run.flush()
    assert run.dropped_metrics == 1
    assert "Names may only contain" in run._metrics.last_error.message


def test_the_trainer_metrics_client_logs_to_a_run_the_client_created(tracking):
    with hanzo_ml.start_run(run_name="trainer-job") as run:
        trainer = MetricsClient(tracking, run.id, flush_interval_s=60)
        for step in range(1, 4):
            trainer.log_metrics({"train/loss": 1.0 / step}, step=step)
        trainer.close()
    history = get(tracking, f"/v1/runs/{run.id}/metrics?key=train/loss")
    assert [p["step"] for p in history["metrics"]] == [1, 2, 3]
