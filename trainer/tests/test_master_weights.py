"""Full fine-tuning on bf16 weights with float32 masters (hanzo_ml/master_weights.py, hardware.weights): gradients
sum in float32, the optimizer and the files see only the masters, a resumed run is bit-identical, and the loss
curve is today's (float32 weights under autocast) within bf16 tolerance. On a CPU with hardware.precision bf16,
which runs the same code a GPU does."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

import hanzo_ml.lora as loop
from hanzo_ml.errors import InputError
from hanzo_ml.master_weights import MasterWeights, wants_bf16_weights
from helpers import demo_records, load_spec_dict, recorded_losses, train_spec, write_jsonl


class TiedModel(torch.nn.Module):
    """Embeddings tied to the head (one parameter under two names), a norm weight and a float32 buffer."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 8)
        self.norm = torch.nn.Parameter(torch.rand(8) + 0.5)
        self.head = torch.nn.Linear(8, 11, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor([0.1234567]))

    def forward(self, ids):
        return self.head(self.embed(ids) * self.norm * (1 + self.scale.to(self.norm.dtype))).float().logsumexp(-1).sum()


def test_gradients_sum_into_float32_masters_which_alone_are_updated_and_saved():
    torch.manual_seed(0)
    model = TiedModel()
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    masters = MasterWeights(model)

    assert [p.dtype for p in model.parameters()] == [torch.bfloat16, torch.bfloat16]  # tied: listed once
    assert len(masters.parameters) == 2 and all(m.dtype == torch.float32 for m in masters.parameters)
    assert all(torch.equal(m, original[n]) for n, m in zip(masters.names, masters.parameters))
    assert model.scale.dtype == torch.float32  # buffers stay as they are

    # two micro-batches: each bf16 gradient is added to the master in float32, then freed
    batches = [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 1, 9]])]
    expected = [torch.zeros_like(m) for m in masters.parameters]
    for ids in batches:
        reference = TiedModel()
        reference.load_state_dict(model.state_dict())  # the same bf16 weights, no masters
        reference.to(torch.bfloat16).scale.data = model.scale.clone()
        reference(ids).backward()
        for total, p in zip(expected, reference.parameters()):
            total += p.grad.float()
        model(ids).backward()
        assert all(p.grad is None for p in model.parameters())
    for total, master in zip(expected, masters.parameters):
        assert torch.equal(master.grad, total)

    optimizer = torch.optim.AdamW(masters.parameters, lr=0.1)
    optimizer.step()
    masters.copy_to_model()
    for weight, master in zip(model.parameters(), masters.parameters):
        assert torch.equal(weight, master.detach().to(torch.bfloat16))

    saved = masters.state_dict()
    assert set(saved) == {"norm", "embed.weight", "head.weight", "scale"}
    assert saved["embed.weight"].data_ptr() == saved["head.weight"].data_ptr()  # one tensor, as tied
    assert all(saved[n].dtype == torch.float32 for n in saved)
    assert torch.equal(saved["norm"], masters.parameters[masters.names.index("norm")].detach())

    masters.release_to_model()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.norm.data_ptr() == masters.parameters[masters.names.index("norm")].data_ptr()  # no copy


def test_a_weight_the_model_keeps_in_float32_is_trained_as_it_is_without_a_master():
    torch.manual_seed(0)
    model = TiedModel()
    model._keep_in_fp32_modules = ["norm"]  # as transformers' classes name a router or a norm
    masters = MasterWeights(model)
    norm = masters.names.index("norm")
    assert model.norm.dtype == torch.float32 and masters.parameters[norm] is model.norm
    assert model.embed.weight.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as the trainer runs it: float32 and bf16 weights meet
        loss = model(torch.tensor([[1, 2, 3]]))
    loss.backward()
    assert model.norm.grad is not None and model.norm.grad.dtype == torch.float32  # its own gradient, kept
    torch.optim.SGD(masters.parameters, lr=0.1).step()
    masters.copy_to_model()
    assert masters.state_dict()["norm"].data_ptr() == model.norm.data_ptr()


def test_an_optimizer_state_keyed_by_name_loads_into_the_masters_by_index(tmp_path):
    """An fsdp run checkpoints its optimizer by parameter name; resumed in one process on bf16 weights, the names
    map to the masters (torch's name-keyed loader would look for the model's own parameters)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    torch.manual_seed(0)
    plain = TiedModel()
    optimizer = torch.optim.AdamW(plain.parameters(), lr=0.1)
    plain(torch.tensor([[1, 2, 3]])).backward()
    optimizer.step()
    by_name = get_optimizer_state_dict(plain, optimizer, options=StateDictOptions(full_state_dict=True))
    assert set(by_name["state"]) == {"embed.weight", "norm"}

    model = TiedModel()
    masters = MasterWeights(model)
    resumed = torch.optim.AdamW(masters.parameters, lr=0.1)
    resumed.load_state_dict(masters.optimizer_state_by_index(by_name, "ckpt"))
    expected = optimizer.state_dict()["state"]
    for index, state in resumed.state_dict()["state"].items():
        assert all(torch.equal(state[k], expected[index][k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    assert masters.optimizer_state_by_index(optimizer.state_dict(), "ckpt") == optimizer.state_dict()  # by index
    with pytest.raises(InputError, match="ckpt: optimizer.pt names parameters this model does not train"):
        masters.optimizer_state_by_index({"state": {}, "param_groups": [{"params": ["lost.weight"]}]}, "ckpt")


def plan_spec(method="full", weights="auto", processes=1):
    return SimpleNamespace(method=method, hardware=SimpleNamespace(weights=weights, processes=processes, nodes=1,
                                                                   strategy="ddp"))


def test_auto_holds_full_fine_tuning_in_bf16_only_under_bf16_precision_in_one_process(caplog):
    bf16 = torch.bfloat16
    assert wants_bf16_weights(plan_spec(), "job.json", bf16)
    assert wants_bf16_weights(plan_spec(weights="bf16"), "job.json", bf16)
    assert not wants_bf16_weights(plan_spec(weights="fp32"), "job.json", bf16)
    with caplog.at_level(logging.INFO, logger="hanzo_ml.master_weights"):
        assert not wants_bf16_weights(plan_spec(), "job.json", None)
        assert not wants_bf16_weights(plan_spec(processes=2), "job.json", bf16)
        assert not wants_bf16_weights(plan_spec(method="lora"), "job.json", bf16)  # nothing to say for adapters
    assert [r.getMessage() for r in caplog.records] == [
        "weights: fp32 under autocast, because hardware.precision resolves to fp32 here (bf16 weights need bf16 "
        "autocast)",
        "weights: fp32 under autocast, because strategy ddp across processes keeps its own precision handling of "
        "float32 weights"]


@pytest.mark.parametrize("spec,precision,needle", [
    (plan_spec(weights="bf16"), None, "hardware.precision resolves to fp32"),
    (plan_spec(method="lora", weights="bf16"), torch.bfloat16, "method lora trains float32 adapters"),
    (plan_spec(weights="bf16", processes=4), torch.bfloat16, "strategy ddp across processes"),
])
def test_bf16_weights_where_they_cannot_apply_are_refused_naming_the_field(spec, precision, needle):
    with pytest.raises(InputError, match=f"job.json: hardware.weights: bf16 cannot run this job: {needle}"):
        wants_bf16_weights(spec, "job.json", precision)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("precision", ["auto", "bf16", "fp32"])
@pytest.mark.parametrize("method,weights,processes", [("full", "auto", 1), ("full", "fp32", 1), ("full", "auto", 2),
                                                      ("lora", "auto", 1)])
def test_the_memory_estimate_predicts_the_trainer_s_weights_choice(device, precision, method, weights, processes):
    from hanzo_ml import memory

    hardware = SimpleNamespace(device=device, gpus_per_node=1 if device == "cuda" else 0, precision=precision,
                               weights=weights, processes=processes, nodes=1, strategy="ddp")
    spec = SimpleNamespace(method=method, hardware=hardware)
    # what recipes.components.resolve_precision answers there (a GPU with bf16)
    resolved = torch.bfloat16 if precision == "bf16" or (precision == "auto" and device == "cuda") else None
    assert memory.bf16_weights_expected(spec) == wants_bf16_weights(spec, "job.json", resolved)
    assert memory.bf16_expected(spec) == (resolved is torch.bfloat16)


# ---- the whole loop on the tiny model ----------------------------------------------------------------

def full_spec(root: Path, base_dir: Path, files: dict, weights: str, steps: int) -> dict:
    spec = train_spec(root, base_dir, files, method="full", data={"packing": True},
                      hyperparameters={"max_steps": steps, "batch_size": 2, "gradient_accumulation_steps": 2,
                                       "learning_rate": 2e-3},
                      checkpoint={"every_steps": 2, "keep_last": 2, "keep_best": False},
                      hardware={"precision": "bf16", "weights": weights})
    spec["validation_path"] = None
    return spec


def train(spec: dict, root: Path) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    return loop.train(load_spec_dict(spec, root), root / "job.json", root / "work")


@pytest.fixture
def files(tmp_path):
    return {"train": write_jsonl(tmp_path / "train.jsonl", demo_records(60)), "validation": None}


def test_twenty_steps_on_bf16_weights_follow_the_float32_weights_loss_curve_and_save_float32(
        tmp_path, tiny_base_dir, files, monkeypatch, caplog):
    curves = {}
    for weights in ("fp32", "bf16"):
        with recorded_losses(monkeypatch) as losses, caplog.at_level(logging.INFO):
            result = train(full_spec(tmp_path / weights, tiny_base_dir, files, weights, 20), tmp_path / weights)
        curves[weights] = losses
    assert "bf16 weights, float32 masters" in caplog.text

    assert len(curves["bf16"]) == len(curves["fp32"]) == 20
    for step, (a, b) in enumerate(zip(curves["bf16"], curves["fp32"]), start=1):
        assert a == pytest.approx(b, rel=5e-3), f"step {step}: {a} vs {b}"  # 7.7e-4 at most, measured
    assert curves["bf16"][-1] < 0.7 * curves["bf16"][0]

    # what is saved is the float32 masters: the checkpoint and the final model, in the files a float32 run writes
    checkpoint = load_file(tmp_path / "bf16" / "checkpoints" / "step-00000020" / "model" / "model.safetensors")
    output = Path(result["model_path"])
    final = load_file(output / "model.safetensors")
    assert checkpoint.keys() == final.keys() and all(t.dtype == torch.float32 for t in final.values())
    assert all(torch.equal(checkpoint[k], final[k]) for k in final)
    assert any(not torch.equal(t, t.to(torch.bfloat16).float()) for t in final.values())  # not rounded to bf16
    assert json.loads((output / "config.json").read_text())["dtype"] == "float32"


def test_a_resumed_run_on_bf16_weights_ends_bit_identical_to_an_uninterrupted_one(
        tmp_path, tiny_base_dir, files, monkeypatch):
    straight = train(full_spec(tmp_path / "straight", tiny_base_dir, files, "bf16", 6), tmp_path / "straight")

    original = loop.write_progress

    def crash_after_step_4(workdir, state, *args, **kwargs):
        original(workdir, state, *args, **kwargs)
        if state.step == 4:
            raise RuntimeError("simulated crash")
    monkeypatch.setattr(loop, "write_progress", crash_after_step_4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(full_spec(tmp_path / "resumed", tiny_base_dir, files, "bf16", 6), tmp_path / "resumed")
    monkeypatch.setattr(loop, "write_progress", original)
    resumed = train(full_spec(tmp_path / "resumed", tiny_base_dir, files, "bf16", 6), tmp_path / "resumed")

    assert (resumed["resumed_from_step"], resumed["steps_trained_this_process"]) == (4, 2)
    a = load_file(tmp_path / "straight" / "output" / "model" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "output" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["final_metrics"]["train/loss"] == straight["final_metrics"]["train/loss"]
