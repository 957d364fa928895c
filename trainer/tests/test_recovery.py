"""Failure recovery: out of memory and divergence end the trainer with their own exit code and failure.json;
a restart with the adjusted spec (what the control plane does) resumes from the last checkpoint."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hanzo_ml.errors import InputError, TrainingDiverged
from hanzo_ml.recovery import DivergenceGuard, Faults, override_learning_rate
from helpers import read_json, train_spec, trainer_env, validate_against, write_spec
from test_tracking import TrackingServer

pytestmark = pytest.mark.slow  # real trainer processes


def run_cli(root: Path, spec: dict, **env) -> subprocess.CompletedProcess:
    root.mkdir(parents=True, exist_ok=True)
    path = write_spec(root / "job.json", spec)
    return subprocess.run([sys.executable, "-m", "hanzo_ml", "train", "--spec", str(path), "--workdir",
                           str(root / "work")], env={**trainer_env(), **env}, capture_output=True, text=True,
                          timeout=300)


def losses(server: TrackingServer) -> dict[int, float]:
    return {p["step"]: p["value"] for p in server.delivered() if p["key"] == "train/loss"}


@pytest.fixture
def server():
    running = TrackingServer()
    yield running
    running.close()


def test_an_injected_nan_stops_the_run_with_exit_4_and_a_restart_at_a_tenth_of_the_lr_finishes(
        tmp_path, tiny_base_dir, chat_files):
    root = tmp_path / "run"
    spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters={"max_steps": 6, "learning_rate": 5e-3},
                      checkpoint={"every_steps": 2, "keep_last": 3})
    first = run_cli(root, spec, HANZO_ML_FAULT_NAN_AT_STEP="3")
    assert first.returncode == 4, first.stderr
    failure = read_json(root / "work" / "failure.json")
    assert (failure["kind"], failure["step"]) == ("diverged", 2)
    assert "step 3: loss nan" in failure["message"]
    assert read_json(root / "work" / "progress.json")["last_checkpoint"] == "step-00000002"

    spec["hyperparameters"]["learning_rate"] = 5e-4  # what the control plane does: LR x divergence_lr_factor
    second = run_cli(root, spec, HANZO_ML_FAULT_NAN_AT_STEP="3")  # the fault fired once; this run gets past it
    assert second.returncode == 0, second.stderr
    assert not (root / "work" / "failure.json").exists()
    result = read_json(root / "work" / "result.json")
    assert (result["resumed_from_step"], result["steps"]) == (2, 6)
    assert all(math.isfinite(v) for v in result["final_metrics"].values())
    state = read_json(root / "checkpoints" / "step-00000004" / "trainer_state.json")
    assert state["config"]["hyperparameters"]["learning_rate"] == 5e-4
    assert "learning rate 0.005 -> 0.0005" in second.stderr


def test_out_of_memory_exits_3_and_half_the_micro_batch_with_twice_the_accumulation_trains_the_same_steps(
        tmp_path, tiny_base_dir, chat_files, server):
    hyperparameters = {"max_steps": 4, "batch_size": 4, "gradient_accumulation_steps": 1}
    faults = {"HANZO_ML_FAULT_OOM_ABOVE_MICRO_BATCH": "2", "HANZO_ML_FAULT_OOM_FROM_STEP": "3"}
    root = tmp_path / "run"
    spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters=hyperparameters, tracking_uri=server.uri)
    first = run_cli(root, spec, **faults)
    assert first.returncode == 3, first.stderr
    failure = read_json(root / "work" / "failure.json")
    assert (failure["kind"], failure["step"], failure["micro_batch"]) == ("out_of_memory", 2, 4)
    assert "a micro-batch of 4 examples does not fit" in failure["message"]

    spec["hyperparameters"].update(batch_size=2, gradient_accumulation_steps=2)  # same 4 examples per step
    second = run_cli(root, spec, **faults)
    assert second.returncode == 0, second.stderr
    assert read_json(root / "work" / "result.json")["resumed_from_step"] == 2
    recovered = losses(server)

    reference_server = TrackingServer()
    try:
        reference = tmp_path / "reference"
        clean = run_cli(reference, train_spec(reference, tiny_base_dir, chat_files, hyperparameters=hyperparameters,
                                              tracking_uri=reference_server.uri))
        assert clean.returncode == 0, clean.stderr
        expected = losses(reference_server)
    finally:
        reference_server.close()
    # The same examples, split into two micro-batches: equal up to float summation order.
    assert sorted(recovered) == sorted(expected) == [1, 2, 3, 4]
    for step in expected:
        assert recovered[step] == pytest.approx(expected[step], rel=1e-5), step
    assert read_json(root / "work" / "result.json")["tokens_seen"] == \
        read_json(reference / "work" / "result.json")["tokens_seen"]


def test_a_corrupt_checkpoint_skipped_on_resume_is_an_event_in_progress_and_result(tmp_path, tiny_base_dir,
                                                                                  chat_files):
    root = tmp_path / "run"
    spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters={"max_steps": 4},
                      checkpoint={"every_steps": 2, "keep_last": 3})
    assert run_cli(root, spec).returncode == 0
    weights = root / "checkpoints" / "step-00000004" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    (root / "output").rename(tmp_path / "first-output")  # a restart rewrites the outputs

    again = run_cli(root, spec)
    assert again.returncode == 0, again.stderr
    result = read_json(root / "work" / "result.json")
    validate_against("train-result.schema.json", result)
    assert result["resumed_from_step"] == 2
    [event] = result["events"]
    assert (event["kind"], event["step"]) == ("checkpoint_skipped", 4)
    assert "step-00000004 does not verify" in event["message"] and "resuming from step-00000002" in event["message"]
    assert read_json(root / "work" / "progress.json")["events"] == result["events"]


def test_the_best_checkpoint_by_validation_loss_survives_pruning(tmp_path, tiny_base_dir, chat_files, server):
    root = tmp_path / "run"
    spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters={"max_steps": 6, "learning_rate": 5e-2},
                      checkpoint={"every_steps": 1, "keep_last": 1}, tracking_uri=server.uri)
    assert run_cli(root, spec).returncode == 0
    evals = {p["step"]: p["value"] for p in server.delivered() if p["key"] == "eval/loss"}
    assert sorted(evals) == [1, 2, 3, 4, 5, 6]
    best_step = min(evals, key=evals.get)
    names = sorted(p.name for p in (root / "checkpoints").iterdir())
    assert names == ["best", "step-00000006"]
    manifest = read_json(root / "checkpoints" / "best" / "manifest.json")
    assert (manifest["step"], manifest["copy_of"]) == (best_step, f"step-{best_step:08d}")
    assert manifest["eval_loss"] == evals[best_step]
    assert read_json(root / "work" / "result.json")["best_checkpoint"] == {"step": best_step,
                                                                           "eval_loss": evals[best_step]}


def test_per_step_metrics_include_mfu_and_peak_memory_and_the_run_totals_its_cost(tmp_path, tiny_base_dir,
                                                                                 chat_files):
    root = tmp_path / "run"
    spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters={"max_steps": 2},
                      hardware={"peak_flops_per_device": 1e11, "price_per_device_hour_usd": 3.6})
    assert run_cli(root, spec).returncode == 0
    result = read_json(root / "work" / "result.json")
    metrics, totals = result["final_metrics"], result["totals"]
    assert 0 < metrics["train/mfu"] < 1
    assert metrics["train/peak_memory_mb"] > 50  # a Python process with torch loaded
    assert totals["tokens"] == result["tokens_seen"] > 0
    assert totals["device_hours"] > 0
    assert totals["cost_usd"] == pytest.approx(totals["device_hours"] * 3.6)
    assert totals["mfu_omitted_reason"] is None

    plain = tmp_path / "plain"
    plain_run = run_cli(plain, train_spec(plain, tiny_base_dir, chat_files, hyperparameters={"max_steps": 1}))
    assert plain_run.returncode == 0, plain_run.stderr
    plain_result = read_json(plain / "work" / "result.json")
    assert "train/mfu" not in plain_result["final_metrics"]
    assert "peak_flops_per_device is not set" in plain_result["totals"]["mfu_omitted_reason"]
    assert plain_result["totals"]["cost_usd"] is None


# ---- units ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss, grad_norm", [(float("nan"), 1.0), (1.0, float("inf")), (float("-inf"), 1.0)])
def test_a_non_finite_loss_or_gradient_norm_is_divergence(loss, grad_norm):
    with pytest.raises(TrainingDiverged, match="step 7"):
        DivergenceGuard(None).check(7, loss, grad_norm)


def test_a_loss_above_the_configured_multiple_of_its_running_minimum_is_divergence():
    guard = DivergenceGuard(3.0)
    for step, loss in enumerate([4.0, 2.0, 1.5, 4.4], start=1):
        guard.check(step, loss, 1.0)
    with pytest.raises(TrainingDiverged, match=r"step 5: loss 4.6000 is above 3.0 x its running minimum 1.5000"):
        guard.check(5, 4.6, 1.0)
    DivergenceGuard(None).check(1, 1e6, 1.0)  # without a multiple only NaN/Inf count


def test_a_malformed_fault_variable_is_an_input_error_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HANZO_ML_FAULT_NAN_AT_STEP", "soon")
    with pytest.raises(InputError, match="HANZO_ML_FAULT_NAN_AT_STEP: expected an integer >= 1, got 'soon'"):
        Faults.from_env(tmp_path)


def test_overriding_the_learning_rate_after_a_restore_rescales_the_schedule():
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = torch.optim.AdamW(params, lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (step + 1))
    optimizer.step()
    scheduler.step()
    assert not override_learning_rate(optimizer, scheduler, 1.0)
    assert override_learning_rate(optimizer, scheduler, 0.1)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 3)


def test_the_failure_file_is_valid_json_with_kind_step_message_and_time(tmp_path):
    from hanzo_ml.recovery import recorded_failure

    (tmp_path / "progress.json").write_text(json.dumps({"step": 9}))
    with pytest.raises(TrainingDiverged), recorded_failure(tmp_path):
        raise TrainingDiverged("step 10: loss nan, grad_norm nan")
    failure = read_json(tmp_path / "failure.json")
    assert set(failure) == {"kind", "step", "message", "at"} and failure["step"] == 9
