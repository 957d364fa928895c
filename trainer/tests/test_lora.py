"""The LoRA recipe: outputs, checkpoint policy, and resume that is bit-identical to an uninterrupted run."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hanzo_ml.lora as lora
from hanzo_ml.lora import ExampleOrder, lr_multiplier
from helpers import load_spec_dict, read_json, train_spec, validate_against

HYPERPARAMETERS = {"max_steps": 6, "batch_size": 5}  # 6 steps x 2 x 5 = 60 examples: crosses into epoch 2


class Crash(Exception):
    pass


def run_training(root: Path, base_dir: Path, files: dict, crash_after_step: int | None = None,
                 monkeypatch=None, **overrides) -> dict:
    spec = train_spec(root, base_dir, files, hyperparameters=HYPERPARAMETERS, **overrides)
    root.mkdir(parents=True, exist_ok=True)
    loaded = load_spec_dict(spec, root)
    if crash_after_step is not None:
        original = lora.write_progress

        def crashing_write_progress(workdir, state, *args):
            original(workdir, state, *args)
            if state.step == crash_after_step:
                raise Crash(f"simulated crash after step {state.step}")
        monkeypatch.setattr(lora, "write_progress", crashing_write_progress)
        with pytest.raises(Crash):
            lora.train(loaded, root / "train-job.json", root / "work")
        monkeypatch.setattr(lora, "write_progress", original)
        return {}
    return lora.train(loaded, root / "train-job.json", root / "work")


def adapter_tensors(root: Path) -> dict[str, torch.Tensor]:
    return load_file(root / "output" / "adapter" / "adapter_model.safetensors")


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


@pytest.fixture
def straight_run(tmp_path, tiny_base_dir, chat_files) -> Path:
    root = tmp_path / "straight"
    run_training(root, tiny_base_dir, chat_files)
    return root


def test_example_order_depends_only_on_seed_and_position():
    straight = ExampleOrder(10, seed=3)
    first = straight.take(7) + straight.take(7)  # crosses from epoch 0 into epoch 1
    assert sorted(first[:10]) == list(range(10))
    resumed = ExampleOrder(10, seed=3, epoch=0, index=7)
    assert resumed.take(7) == first[7:]
    assert (resumed.epoch, resumed.index) == (1, 4)
    assert ExampleOrder(10, seed=4).take(10) != first[:10]


def test_the_schedule_warms_up_then_decays_without_a_step_at_zero():
    multipliers = [lr_multiplier(step, warmup_steps=3, max_steps=10) for step in range(10)]
    assert multipliers[:4] == [0.25, 0.5, 0.75, 1.0]
    assert multipliers[-1] == pytest.approx(1 / 7)
    assert all(0 < m <= 1 for m in multipliers)


def test_training_writes_progress_checkpoints_adapter_and_result(straight_run):
    progress = read_json(straight_run / "work" / "progress.json")
    validate_against("train-progress.schema.json", progress)
    assert progress["step"] == 6 and progress["max_steps"] == 6
    assert progress["resumed_from_step"] is None
    assert progress["last_checkpoint"] == "step-00000006"
    assert set(progress["metrics"]) == {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_second",
                                        "train/peak_memory_mb", "eval/loss"}

    checkpoints = sorted(p.name for p in (straight_run / "checkpoints").iterdir() if p.name.startswith("step-"))
    assert checkpoints == ["step-00000004", "step-00000006"]  # keep_last=2 pruned step 2
    manifest = read_json(straight_run / "checkpoints" / "step-00000006" / "manifest.json")
    validate_against("checkpoint-manifest.schema.json", manifest)
    assert {f["path"] for f in manifest["files"]} >= {
        "adapter/adapter_model.safetensors", "adapter/adapter_config.json", "optimizer.pt", "scheduler.pt",
        "rng_state.pt", "trainer_state.json"}
    state = read_json(straight_run / "checkpoints" / "step-00000006" / "trainer_state.json")
    assert (state["step"], state["epoch"], state["index"]) == (6, 1, 12)

    result = read_json(straight_run / "work" / "result.json")
    assert result["steps"] == 6 and result["steps_trained_this_process"] == 6
    assert result["resumed_from_step"] is None
    assert result["adapter_path"] == str(straight_run / "output" / "adapter")
    assert result["tokens_seen"] == state["tokens_seen"] > 0
    assert result["final_metrics"]["eval/loss"] > 0
    assert (straight_run / "output" / "adapter" / "adapter_config.json").is_file()


def test_the_loss_goes_down_on_the_training_data(tmp_path, tiny_base_dir, chat_files):
    # A random base barely moves its near-uniform output through LoRA alone (hence the pre-trained demo base),
    # but the loss must still clearly fall.
    everything = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    results = []
    for steps in (1, 30):
        root = tmp_path / f"steps-{steps}"
        root.mkdir()
        spec = train_spec(root, tiny_base_dir, chat_files, hyperparameters={
            "max_steps": steps, "learning_rate": 2e-2, "lora_rank": 8, "target_modules": everything})
        results.append(lora.train(load_spec_dict(spec, root), root / "job.json", root / "work"))
    first, last = (r["final_metrics"] for r in results)
    assert last["train/loss"] < 0.9 * first["train/loss"]
    assert last["eval/loss"] < first["eval/loss"]


def test_resumed_training_is_bit_identical_to_an_uninterrupted_run(
        tmp_path, tiny_base_dir, chat_files, straight_run, monkeypatch):
    resumed = tmp_path / "resumed"
    run_training(resumed, tiny_base_dir, chat_files, crash_after_step=4, monkeypatch=monkeypatch)
    assert read_json(resumed / "work" / "progress.json")["last_checkpoint"] == "step-00000004"

    result = run_training(resumed, tiny_base_dir, chat_files)
    assert (result["resumed_from_step"], result["steps_trained_this_process"]) == (4, 2)
    assert read_json(resumed / "work" / "progress.json")["resumed_from_step"] == 4
    assert_bit_identical(adapter_tensors(straight_run), adapter_tensors(resumed))
    straight_metrics = read_json(straight_run / "work" / "result.json")["final_metrics"]
    for key in ("train/loss", "train/grad_norm", "eval/loss", "train/lr"):
        assert result["final_metrics"][key] == straight_metrics[key]
    assert result["tokens_seen"] == read_json(straight_run / "work" / "result.json")["tokens_seen"]


def test_a_corrupt_newest_checkpoint_is_skipped_and_the_run_still_ends_identical(
        tmp_path, tiny_base_dir, chat_files, straight_run, monkeypatch, caplog):
    resumed = tmp_path / "resumed"
    run_training(resumed, tiny_base_dir, chat_files, crash_after_step=4, monkeypatch=monkeypatch)
    weights = resumed / "checkpoints" / "step-00000004" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)  # same size, different bytes

    result = run_training(resumed, tiny_base_dir, chat_files)
    assert "skipping checkpoint step-00000004: adapter/adapter_model.safetensors: sha256 does not match" \
        in caplog.text
    assert result["resumed_from_step"] == 2
    assert_bit_identical(adapter_tensors(straight_run), adapter_tensors(resumed))


def test_a_job_restarted_after_it_finished_only_rewrites_its_outputs(tmp_path, tiny_base_dir, chat_files,
                                                                     straight_run):
    shutil.rmtree(straight_run / "output")
    result = run_training(straight_run, tiny_base_dir, chat_files)
    assert (result["resumed_from_step"], result["steps_trained_this_process"], result["steps"]) == (6, 0, 6)
    assert (straight_run / "output" / "adapter" / "adapter_model.safetensors").is_file()
