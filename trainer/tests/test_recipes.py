"""Every fine-tuning method runs through the same loop: it learns, checkpoints, resumes bit-identically, and a
method this machine cannot run, or a job that cannot fit, is refused before any model is loaded."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hanzo_ml.lora as loop
from hanzo_ml.cli import main
from hanzo_ml.errors import InputError
from hanzo_ml.recipes import METHODS, qlora
from helpers import demo_records, load_spec_dict, read_json, train_spec, validate_against, write_jsonl, write_spec

PREFERENCE_METHODS = ("dpo", "orpo")
EVERYTHING = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class Crash(Exception):
    pass


def preference_records(count: int) -> list[dict]:
    """The demo routing task as pairs: the right team is preferred to an unhelpful answer (a random base could
    not learn which of two teams is right from 48 pairs, but it can learn to prefer answering at all)."""
    return [{"prompt": r["messages"][:-1], "chosen": [{"role": "assistant", "content": r["messages"][-1]["content"]}],
             "rejected": "I do not know."} for r in demo_records(count)]


@pytest.fixture
def preference_files(tmp_path) -> dict[str, Path]:
    pairs = preference_records(60)
    return {"train": write_jsonl(tmp_path / "pairs-train.jsonl", pairs[:48]),
            "validation": write_jsonl(tmp_path / "pairs-validation.jsonl", pairs[48:])}


def method_spec(method: str, root: Path, base_dir: Path, chat_files, preference_files, **hyperparameters) -> dict:
    files = preference_files if method in PREFERENCE_METHODS else chat_files
    spec = train_spec(root, base_dir, files, method=method, hyperparameters=hyperparameters)
    if method == "qlora":
        spec["quantization"] = {"compute_dtype": "float32"}
    if method == "adalora":
        spec["adalora"] = {"init_rank": 8, "target_rank": 4, "tinit": 2, "tfinal": 2, "delta_t": 2}
    return spec


def run(spec: dict, root: Path) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    return loop.train(load_spec_dict(spec, root), root / "train-job.json", root / "work")


def checkpoint_metrics(root: Path, step: int) -> dict:
    return read_json(root / "checkpoints" / f"step-{step:08d}" / "trainer_state.json")["metrics"]


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_every_method_lowers_its_loss_and_writes_its_output(method, tmp_path, tiny_base_dir, chat_files,
                                                            preference_files):
    learning_rate = {"full": 3e-3, "dpo": 1e-2}.get(method, 3e-2)
    spec = method_spec(method, tmp_path, tiny_base_dir, chat_files, preference_files, max_steps=12,
                       gradient_accumulation_steps=1, learning_rate=learning_rate, lora_rank=8,
                       target_modules=EVERYTHING)
    spec["checkpoint"] = {"every_steps": 1, "keep_last": 12}
    result = run(spec, tmp_path)

    validate_against("train-result.schema.json", result)
    first, last = checkpoint_metrics(tmp_path, 1), result["final_metrics"]
    assert last["eval/loss"] < first["eval/loss"], (method, first, last)
    assert last["train/loss"] < first["train/loss"], (method, first, last)
    assert result["method"] == method
    if method == "full":
        assert result["adapter_path"] is None
        assert (Path(result["model_path"]) / "model.safetensors").is_file()
        assert (Path(result["model_path"]) / "tokenizer.json").is_file()
    else:
        assert result["model_path"] is None
        assert (Path(result["adapter_path"]) / "adapter_model.safetensors").is_file()
    if method == "dpo":  # policy == reference at the start: the DPO loss starts at ln 2
        assert first["train/loss"] == pytest.approx(0.6931, abs=1e-4) and last["eval/loss"] < 0.6
    if method in PREFERENCE_METHODS:
        assert last["train/rewards/accuracies"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "adalora", "dpo", "orpo"])
def test_a_resumed_run_of_each_method_ends_bit_identical_to_an_uninterrupted_one(
        method, tmp_path, tiny_base_dir, chat_files, preference_files, monkeypatch):
    def spec_for(root: Path) -> dict:
        return method_spec(method, root, tiny_base_dir, chat_files, preference_files, max_steps=6, batch_size=4)

    straight = run(spec_for(tmp_path / "straight"), tmp_path / "straight")

    original = loop.write_progress

    def crash_after_step_4(workdir, state, *args, **kwargs):
        original(workdir, state, *args, **kwargs)
        if state.step == 4:
            raise Crash("simulated crash")
    monkeypatch.setattr(loop, "write_progress", crash_after_step_4)
    with pytest.raises(Crash):
        run(spec_for(tmp_path / "resumed"), tmp_path / "resumed")
    monkeypatch.setattr(loop, "write_progress", original)
    resumed = run(spec_for(tmp_path / "resumed"), tmp_path / "resumed")

    assert (resumed["resumed_from_step"], resumed["steps_trained_this_process"]) == (4, 2)
    output = "model/model.safetensors" if method == "full" else "adapter/adapter_model.safetensors"
    a = load_file(tmp_path / "straight" / "output" / output)
    b = load_file(tmp_path / "resumed" / "output" / output)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), f"{method}: resumed weights differ"
    assert resumed["final_metrics"]["train/loss"] == straight["final_metrics"]["train/loss"]


def test_adalora_reallocates_its_rank_budget_during_training(tmp_path, tiny_base_dir, chat_files, preference_files):
    spec = method_spec("adalora", tmp_path, tiny_base_dir, chat_files, preference_files, max_steps=8,
                       target_modules=["q_proj", "v_proj"])
    result = run(spec, tmp_path)
    config = read_json(Path(result["adapter_path"]) / "adapter_config.json")
    ranks = [int(sum(mask)) for mask in config["rank_pattern"].values()]
    assert len(ranks) == 4 and sum(ranks) <= 4 * 4 < 4 * 8  # pruned to the final budget: target_rank on average
    assert all(rank <= 8 for rank in ranks)


def test_dpo_refuses_chat_records_naming_the_file_line_and_field(tmp_path, tiny_base_dir, chat_files, capsys):
    spec = train_spec(tmp_path, tiny_base_dir, chat_files, method="dpo")
    code = main(["train", "--spec", str(write_spec(tmp_path / "job.json", spec)), "--workdir", str(tmp_path / "w")])
    assert code == 2
    assert capsys.readouterr().err.strip().startswith(f"{chat_files['train']}:1: chosen: is required")


def test_asking_for_cuda_on_a_machine_without_it_exits_2_before_loading_the_model(
        tmp_path, tiny_base_dir, chat_files, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = train_spec(tmp_path, tiny_base_dir, chat_files, method="full", hardware={"device": "cuda"})
    code = main(["train", "--spec", str(write_spec(tmp_path / "job.json", spec)), "--workdir", str(tmp_path / "w")])
    assert code == 2
    assert "hardware.device: method full was asked to run on cuda; this machine has no CUDA device" in \
        capsys.readouterr().err


def test_qlora_on_a_cpu_without_avx2_is_refused_with_what_it_needs_and_what_the_machine_has(
        tmp_path, tiny_base_dir, chat_files, monkeypatch):
    monkeypatch.setattr(qlora, "cpu_has_avx2", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = load_spec_dict(train_spec(tmp_path, tiny_base_dir, chat_files, method="qlora"), tmp_path)
    with pytest.raises(InputError, match="method: qlora needs a CUDA GPU or an x86-64 CPU with AVX2 for "
                                         "bitsandbytes 4-bit layers; this machine has"):
        qlora.check(spec, tmp_path / "job.json")


def test_a_job_that_cannot_fit_its_device_is_refused_with_the_micro_batch_that_would(
        tmp_path, tiny_base_dir, chat_files, capsys):
    spec = train_spec(tmp_path, tiny_base_dir, chat_files, method="full", hyperparameters={"batch_size": 32},
                      hardware={"device": "cpu", "device_memory_gb": 0.01})
    code = main(["train", "--spec", str(write_spec(tmp_path / "job.json", spec)), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert code == 2
    assert "hardware: method full needs about" in err and "this device has 0.0 GiB" in err
    assert "lower hyperparameters.batch_size to " in err
    assert not (tmp_path / "w" / "progress.json").exists()


def test_packed_training_feeds_rows_of_several_examples_per_batch_slot(tmp_path, tiny_base_dir, chat_files,
                                                                       preference_files):
    results = {}
    for packing in (False, True):
        root = tmp_path / f"packing-{packing}"
        spec = method_spec("lora", root, tiny_base_dir, chat_files, preference_files, max_steps=2,
                           max_seq_length=256)
        spec["data"] = {"packing": packing}
        results[packing] = run(spec, root)
    assert results[True]["tokens_seen"] > 1.5 * results[False]["tokens_seen"]
    assert results[True]["final_metrics"]["eval/loss"] == pytest.approx(
        results[False]["final_metrics"]["eval/loss"], rel=0.05)  # same model family, same data, sane loss


def test_an_adalora_schedule_that_leaves_no_steps_to_reallocate_is_refused_naming_the_fields(
        tmp_path, tiny_base_dir, chat_files, preference_files, capsys):
    spec = method_spec("adalora", tmp_path, tiny_base_dir, chat_files, preference_files, max_steps=4)
    spec["adalora"] = {"tinit": 2, "tfinal": 2}
    code = main(["train", "--spec", str(write_spec(tmp_path / "job.json", spec)), "--workdir", str(tmp_path / "w")])
    assert code == 2
    assert "adalora.tinit + adalora.tfinal (2 + 2) must be less than hyperparameters.max_steps (4)" in \
        capsys.readouterr().err



def test_bf16_precision_autocasts_the_forward_and_keeps_fp32_weights(tmp_path, tiny_base_dir, chat_files,
                                                                    preference_files):
    from hanzo_ml.modeling import load_causal_lm
    from hanzo_ml.recipes.components import autocast_forward, resolve_precision

    spec = method_spec("lora", tmp_path, tiny_base_dir, chat_files, preference_files, max_steps=3)
    cpu = torch.device("cpu")
    assert resolve_precision(load_spec_dict(spec, tmp_path), cpu) is None  # auto: fp32 off CUDA
    spec["hardware"] = {**spec.get("hardware", {}), "precision": "bf16"}
    assert resolve_precision(load_spec_dict(spec, tmp_path), cpu) is torch.bfloat16

    model = load_causal_lm(tiny_base_dir)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert model(input_ids=ids).logits.dtype == torch.float32
    autocast_forward(model, torch.bfloat16)
    assert model(input_ids=ids).logits.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())

    result = run(spec, tmp_path)  # trains end to end under autocast; the adapter is saved in fp32
    adapter = load_file(Path(result["adapter_path"]) / "adapter_model.safetensors")
    assert adapter and all(t.dtype == torch.float32 for t in adapter.values())
    assert torch.isfinite(torch.tensor(result["final_metrics"]["train/loss"]))


def test_qlora_counts_the_flops_of_its_unpacked_4_bit_weights(tmp_path, tiny_base_dir, chat_files):
    """MFU's 6N uses every weight the forward multiplies with; bitsandbytes reports a 4-bit matrix's packed size."""
    from hanzo_ml.metrics import parameter_count
    from hanzo_ml.modeling import load_causal_lm

    spec = load_spec_dict(method_spec("qlora", tmp_path, tiny_base_dir, chat_files, None), tmp_path)
    qlora.RECIPE.check(spec, tmp_path / "job.json")
    model = qlora.RECIPE.build_model(spec, tmp_path / "job.json", torch.device("cpu"))
    adapter = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert any(type(p).__name__ == "Params4bit" for p in model.parameters())
    assert parameter_count(model) == parameter_count(load_causal_lm(tiny_base_dir)) + adapter


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_under_bf16_adapters_take_their_input_uncast_and_train_bit_identically(
        method, tmp_path, tiny_base_dir, chat_files, preference_files, monkeypatch):
    """peft casts each adapter's input to float32 by default; under autocast that copy changes no value
    (recipes.components.keep_adapter_inputs), so skipping it must leave the trained adapter bit-identical."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    from hanzo_ml.recipes import components

    def adapter_after_three_steps(root: Path) -> dict:
        spec = method_spec(method, root, tiny_base_dir, chat_files, preference_files, max_steps=3,
                           target_modules=EVERYTHING)
        spec["hardware"] = {"precision": "bf16"}
        if method == "qlora":
            spec["quantization"] = {"compute_dtype": "bfloat16"}
        result = run(spec, root)
        return load_file(Path(result["adapter_path"]) / "adapter_model.safetensors")

    seen = []
    keep = components.keep_adapter_inputs

    def recording(model):
        seen.append(keep(model))
        seen.append(all(not m.cast_input_dtype_enabled for m in model.modules() if isinstance(m, BaseTunerLayer)))
        return seen[0]
    monkeypatch.setattr(components, "keep_adapter_inputs", recording)
    uncast = adapter_after_three_steps(tmp_path / "uncast")
    layers = json.loads((tiny_base_dir / "config.json").read_text())["num_hidden_layers"]
    assert seen == [layers * len(EVERYTHING), True]  # every adapted projection
    monkeypatch.setattr(components, "keep_adapter_inputs", lambda model: 0)  # peft's default: cast to float32
    cast = adapter_after_three_steps(tmp_path / "cast")
    assert uncast.keys() == cast.keys()
    assert all(torch.equal(uncast[k], cast[k]) for k in cast), method


@pytest.mark.parametrize("method", PREFERENCE_METHODS + ("adalora",))
def test_every_adapter_method_trains_under_bf16_with_uncast_adapter_inputs(
        method, tmp_path, tiny_base_dir, chat_files, preference_files):
    """trl's DPO and ORPO losses and AdaLoRA's layers run their adapters through the autocast forward too."""
    spec = method_spec(method, tmp_path, tiny_base_dir, chat_files, preference_files, max_steps=5)
    spec["hardware"] = {"precision": "bf16"}
    result = run(spec, tmp_path)
    assert result["steps"] == 5 and torch.isfinite(torch.tensor(result["final_metrics"]["train/loss"]))
