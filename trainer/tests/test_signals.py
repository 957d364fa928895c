"""A real trainer process, stopped by SIGTERM (emergency checkpoint, exit 143) or SIGKILL, then resumed."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hanzo_ml.lora as lora
from hanzo_ml.checkpoint import verify_checkpoint
from helpers import load_spec_dict, read_json, train_spec, trainer_env, write_spec

pytestmark = pytest.mark.slow  # real subprocesses: ~8 s each when the CPUs are idle, far more when they are not

SLOW_STEPS = Path(__file__).with_name("slow_steps.py")


def start_slow_training(root: Path, spec: dict, delay_s: float = 0.3) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    path = write_spec(root / "job.json", spec)
    env = {**trainer_env(), "STEP_DELAY_S": str(delay_s)}
    return subprocess.Popen([sys.executable, str(SLOW_STEPS), "train", "--spec", str(path), "--workdir",
                             str(root / "work")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(condition, process: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"trainer exited early ({process.returncode}): {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("timed out waiting for the trainer")
        time.sleep(0.05)


def progress_step(root: Path) -> int:
    try:
        return json.loads((root / "work" / "progress.json").read_text())["step"]
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def finish_in_process(root: Path, spec: dict) -> dict:
    return lora.train(load_spec_dict(spec, root), root / "job.json", root / "work")


def assert_same_adapter(a: Path, b: Path) -> None:
    left = load_file(a / "output" / "adapter" / "adapter_model.safetensors")
    right = load_file(b / "output" / "adapter" / "adapter_model.safetensors")
    assert left.keys() == right.keys()
    assert all(torch.equal(left[k], right[k]) for k in left)


def test_sigterm_finishes_the_step_writes_an_emergency_checkpoint_and_exits_143(tmp_path, tiny_base_dir,
                                                                                 chat_files):
    overrides = {"hyperparameters": {"max_steps": 12}, "checkpoint": {"every_steps": 100, "keep_last": 2}}
    stopped = tmp_path / "stopped"
    spec = train_spec(stopped, tiny_base_dir, chat_files, **overrides)
    process = start_slow_training(stopped, spec)
    wait_for(lambda: progress_step(stopped) >= 3, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 143, stderr
    progress = read_json(stopped / "work" / "progress.json")
    assert 3 <= progress["step"] < 12
    assert progress["last_checkpoint"] == f"step-{progress['step']:08d}"
    assert verify_checkpoint(stopped / "checkpoints" / progress["last_checkpoint"]).step == progress["step"]
    assert "emergency checkpoint" in stderr

    result = finish_in_process(stopped, spec)
    assert result["resumed_from_step"] == progress["step"]
    straight = tmp_path / "straight"
    straight.mkdir()
    finish_in_process(straight, train_spec(straight, tiny_base_dir, chat_files, **overrides))
    assert_same_adapter(straight, stopped)


def test_a_killed_trainer_resumes_from_its_last_checkpoint_bit_identically(tmp_path, tiny_base_dir,
                                                                           chat_files):
    overrides = {"hyperparameters": {"max_steps": 12}, "checkpoint": {"every_steps": 2, "keep_last": 3}}
    killed = tmp_path / "killed"
    spec = train_spec(killed, tiny_base_dir, chat_files, **overrides)
    process = start_slow_training(killed, spec, delay_s=0.2)
    wait_for(lambda: (killed / "checkpoints" / "step-00000004").is_dir(), process)
    process.kill()
    process.communicate(timeout=30)

    result = finish_in_process(killed, spec)
    assert result["resumed_from_step"] is not None and result["resumed_from_step"] >= 4
    assert not any(p.name.startswith(".tmp-") for p in (killed / "checkpoints").iterdir())
    straight = tmp_path / "straight"
    straight.mkdir()
    finish_in_process(straight, train_spec(straight, tiny_base_dir, chat_files, **overrides))
    assert_same_adapter(straight, killed)


def test_a_run_killed_mid_run_then_resumed_logs_the_same_loss_at_every_later_step(tmp_path, tiny_base_dir,
                                                                                   chat_files):
    """Bitwise, not allclose: on CPU with deterministic kernels, fixed threads and the data order a pure function
    of (seed, position), the resumed run computes exactly the same floating-point operations in the same order."""
    from test_tracking import TrackingServer

    overrides = {"hyperparameters": {"max_steps": 9}, "checkpoint": {"every_steps": 3, "keep_last": 2}}
    servers = {name: TrackingServer() for name in ("killed", "straight")}
    try:
        killed = tmp_path / "killed"
        spec = train_spec(killed, tiny_base_dir, chat_files, tracking_uri=servers["killed"].uri, **overrides)
        process = start_slow_training(killed, spec, delay_s=0.2)
        wait_for(lambda: progress_step(killed) >= 4, process)  # past the step-3 checkpoint, mid-interval
        process.kill()
        process.communicate(timeout=30)
        resumed = finish_in_process(killed, spec)

        straight = tmp_path / "straight"
        straight.mkdir()
        finish_in_process(straight, train_spec(straight, tiny_base_dir, chat_files,
                                               tracking_uri=servers["straight"].uri, **overrides))
        after_resume = {p["step"]: p["value"] for p in servers["killed"].delivered()
                        if p["key"] == "train/loss" and p["step"] > resumed["resumed_from_step"]}
        reference = {p["step"]: p["value"] for p in servers["straight"].delivered() if p["key"] == "train/loss"}
    finally:
        for server in servers.values():
            server.close()
    assert resumed["resumed_from_step"] in (3, 6)
    assert sorted(after_resume) == list(range(resumed["resumed_from_step"] + 1, 10))
    # Steps the killed process had already logged past its checkpoint are logged again; the later value wins.
    assert all(after_resume[step] == reference[step] for step in after_resume), (after_resume, reference)
    assert_same_adapter(straight, killed)
