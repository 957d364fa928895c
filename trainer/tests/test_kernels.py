"""The fast path of a training step (hanzo_ml/kernels.py) against today's path: the chunked loss over labelled
positions, the attention masks built from packed rows' example boundaries, and 20-step loss curves.

FlexAttention's backward and Liger's Triton kernels do not run on a CPU: bench/trainer/gpu_check.py compares
their losses and gradients with this reference path on a GPU, inside the GPU benchmark run."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from hanzo_ml import kernels
from hanzo_ml.chat import IGNORE_INDEX, encode_dataset
from hanzo_ml.errors import InputError
from hanzo_ml.packing import collate_packed, pack

from helpers import demo_records, load_spec_dict, recorded_losses, train_spec, write_jsonl


@pytest.fixture
def tokenizer(tiny_base_dir):
    from hanzo_ml.chat import load_tokenizer

    return load_tokenizer(tiny_base_dir)


def reference_loss(hidden, weight, targets):
    logits = (hidden @ weight.t()).float()
    return F.cross_entropy(logits, targets, reduction="sum")


def test_the_chunked_loss_and_its_gradients_equal_the_full_logits_cross_entropy(monkeypatch):
    monkeypatch.setattr(kernels, "LOSS_CHUNK_BYTES", 4 * 50 * 7)  # 7 rows a chunk: the last chunk is short
    torch.manual_seed(0)
    hidden = torch.randn(40, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(0, 50, (40,))

    ours = kernels.linear_cross_entropy(hidden, weight, targets)
    (ours * 0.37).backward()  # a scale, as the objective divides by the step's target tokens
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    (reference_loss(hidden, weight, targets) * 0.37).backward()

    assert ours.item() == pytest.approx(reference_loss(hidden, weight, targets).item(), rel=1e-6)
    assert torch.allclose(grads[0], hidden.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(grads[1], weight.grad, rtol=1e-5, atol=1e-6)


def test_the_chunked_loss_under_bf16_autocast_matches_the_autocast_reference_within_bf16_tolerance():
    torch.manual_seed(1)
    hidden = torch.randn(64, 32, requires_grad=True)
    weight = torch.randn(97, 32, requires_grad=True)
    targets = torch.randint(0, 97, (64,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = kernels.linear_cross_entropy(hidden, weight, targets)
        reference = reference_loss(hidden, weight, targets)
    assert ours.dtype == torch.float32
    assert ours.item() == pytest.approx(reference.item(), rel=1e-3)
    ours.backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    reference.backward()
    for a, b in zip(grads, (hidden.grad, weight.grad)):
        assert (a - b).norm() / b.norm() < 2e-2


def test_a_frozen_head_gets_no_gradient_and_evaluation_computes_none():
    hidden = torch.randn(8, 4, requires_grad=True)
    weight = torch.randn(10, 4)                       # frozen, as under LoRA
    loss = kernels.linear_cross_entropy(hidden, weight, torch.randint(0, 10, (8,)))
    loss.backward()
    assert hidden.grad is not None and weight.grad is None
    with torch.no_grad():
        assert not kernels.linear_cross_entropy(hidden, weight, torch.zeros(8, dtype=torch.long)).requires_grad


def test_the_document_mask_lets_a_token_see_only_the_earlier_tokens_of_its_own_example():
    segments = torch.tensor([[0, 0, 1, 1, 1, -1]])
    mask = kernels.document_mask(segments)[0, 0].int()
    assert mask.tolist() == [[1, 0, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0, 0],
                             [0, 0, 1, 0, 0, 0],
                             [0, 0, 1, 1, 0, 0],
                             [0, 0, 1, 1, 1, 0],
                             [0, 0, 0, 0, 0, 1]]   # padding sees itself only


def test_flex_attention_with_the_document_block_mask_equals_sdpa_with_the_dense_mask_on_cpu():
    """Forward only: FlexAttention has no backward on a CPU in this torch."""
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(2)
    segments = torch.tensor([[0] * 100 + [1] * 90 + [2] * 50 + [-1] * 16,
                             [0] * 30 + [1] * 200 + [-1] * 26])              # (2, 256)
    q, k, v = (torch.randn(2, 4, 256, 16) for _ in range(3))
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=kernels.document_mask(segments))
    flex = flex_attention(q, k, v, block_mask=kernels.document_block_mask(segments))
    assert torch.allclose(flex, dense, rtol=1e-5, atol=1e-5)


def test_a_packed_batch_pads_to_the_plan_s_length_with_padding_that_is_never_a_target():
    batch = {"input_ids": torch.ones(2, 130, dtype=torch.long), "labels": torch.ones(2, 130, dtype=torch.long),
             "segment_ids": torch.zeros(2, 130, dtype=torch.long), "position_ids": torch.zeros(2, 130, dtype=torch.long),
             "attention_mask": torch.ones(2, 130, dtype=torch.long)}
    padded = kernels.padded_to_block(batch, 256)
    assert padded["input_ids"].shape == (2, 256)
    assert (padded["labels"][:, 130:] == IGNORE_INDEX).all() and (padded["segment_ids"][:, 130:] == -1).all()
    assert padded["attention_mask"][:, 130:].sum() == 0


def test_a_flex_model_eval_loss_equals_the_sdpa_model_eval_loss_on_cpu(tiny_base_dir, tokenizer):
    from hanzo_ml.modeling import load_causal_lm

    examples = encode_dataset(tokenizer, [r["messages"] for r in demo_records(12)], 120, "memory")
    batch = collate_packed(pack(examples, max_seq_length=240), pad_id=0)
    model = load_causal_lm(tiny_base_dir)
    with torch.no_grad():
        sdpa = kernels.summed_nll(model, batch).item()
        model.set_attn_implementation("flex_attention")
        flex = kernels.summed_nll(model, batch).item()
    assert flex == pytest.approx(sdpa, rel=1e-5)


# ---- the plan --------------------------------------------------------------------------------------

def plan_spec(method="lora", packing=True, attention="auto", kernels_="auto", compile_=False):
    return SimpleNamespace(method=method, data=SimpleNamespace(packing=packing),
                           hyperparameters=SimpleNamespace(max_seq_length=1000),
                           hardware=SimpleNamespace(attention=attention, kernels=kernels_, compile=compile_))


def test_on_a_cpu_auto_falls_back_to_sdpa_and_the_model_s_own_kernels_and_says_why():
    plan = kernels.plan_step(plan_spec(), "job.json", torch.device("cpu"), "llama")
    assert (plan.attention, plan.kernels) == ("sdpa", "none")
    assert any("no backward on cpu" in note for note in plan.notes)
    assert any("CUDA device" in note for note in plan.notes)


@pytest.mark.parametrize("field,value,needle", [
    ("attention", "flex", "hardware.attention: flex cannot run this job: FlexAttention has no backward on cpu"),
    ("kernels_", "liger", "hardware.kernels: liger cannot run this job"),
])
def test_asking_for_a_gpu_path_on_a_cpu_is_refused_naming_the_field(field, value, needle):
    with pytest.raises(InputError, match=needle):
        kernels.plan_step(plan_spec(**{field: value}), "job.json", torch.device("cpu"), "llama")


def test_compiled_layers_replace_liger_and_asking_for_both_is_refused():
    plan = kernels.plan_step(plan_spec(compile_=True), "job.json", torch.device("cpu"), "llama")
    assert (plan.compile, plan.kernels, plan.packed_length) == (True, "none", 1024)  # 1000 rounded up to 128s
    assert any("hardware.compile fuses them" in note for note in plan.notes)
    with pytest.raises(InputError, match="hardware.kernels: liger with hardware.compile true"):
        kernels.plan_step(plan_spec(compile_=True, kernels_="liger"), "job.json", torch.device("cpu"), "llama")


def test_unpacked_rows_and_preference_methods_keep_sdpa_even_where_flex_runs():
    assert "data.packing is off" in kernels.flex_unavailable(plan_spec(packing=False), torch.device("cuda"))
    assert "trl" in kernels.flex_unavailable(plan_spec(method="dpo"), torch.device("cuda"))


# ---- 20 steps of the tiny model: the fast path's loss curve is today's --------------------------

def loss_curve(tmp_path, tiny_base_dir, files, method, packing, monkeypatch, reference: bool,
               hardware: dict | None = None, steps: int = 20) -> list[float]:
    import hanzo_ml.lora as loop

    with monkeypatch.context() as patch, recorded_losses(monkeypatch) as losses:
        if reference:  # today's path: the model's full logits, then cross-entropy
            patch.setattr(kernels, "fused_loss_head", lambda model: None)
        work = tmp_path / ("reference" if reference else "fast") / ("compiled" if hardware else "eager")
        spec = train_spec(work, tiny_base_dir, files, method=method, data={"packing": packing},
                          hyperparameters={"max_steps": steps, "batch_size": 2, "gradient_accumulation_steps": 2,
                                           "learning_rate": 2e-3 if method == "full" else 5e-3},
                          checkpoint={"every_steps": steps, "keep_last": 1, "keep_best": False},
                          hardware=hardware or {})
        spec["validation_path"] = None
        work.mkdir(parents=True, exist_ok=True)
        loop.train(load_spec_dict(spec, work), work / "job.json", work / "work")
    return losses


@pytest.mark.parametrize("method,packing", [("lora", True), ("lora", False), ("full", True), ("full", False)])
def test_twenty_steps_on_the_fast_path_follow_today_s_loss_curve_within_1e_4(
        tmp_path, tiny_base_dir, monkeypatch, method, packing):
    records = demo_records(60)
    files = {"train": write_jsonl(tmp_path / "train.jsonl", records), "validation": None}
    reference = loss_curve(tmp_path, tiny_base_dir, files, method, packing, monkeypatch, reference=True)
    fast = loss_curve(tmp_path, tiny_base_dir, files, method, packing, monkeypatch, reference=False)
    assert len(fast) == len(reference) == 20
    for step, (a, b) in enumerate(zip(fast, reference), start=1):
        assert a == pytest.approx(b, rel=1e-4), f"step {step}: {a} vs {b}"
    assert fast[-1] < fast[0]


def test_the_chunked_loss_applies_to_a_lora_model_and_not_to_a_wrapped_one(tiny_base_dir):
    from hanzo_ml.modeling import load_causal_lm
    from hanzo_ml.recipes.components import attach_adapter, lora_config

    hp = SimpleNamespace(lora_rank=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    model = attach_adapter(load_causal_lm(tiny_base_dir), lora_config(hp), "job.json")
    assert kernels.fused_loss_head(model) is kernels.causal_lm(model).lm_head
    wrapped = SimpleNamespace(module=model)
    assert kernels.fused_loss_head(wrapped) is None


def base_with_layers(tmp_path, tiny_base_dir, layers: int):
    """The tiny model's config and tokenizer with `layers` decoder layers (seeded random weights)."""
    import shutil

    from transformers import AutoConfig, LlamaForCausalLM

    config = AutoConfig.from_pretrained(tiny_base_dir)
    config.num_hidden_layers = layers
    torch.manual_seed(0)
    out = tmp_path / f"{layers}-layers"
    LlamaForCausalLM(config).save_pretrained(out)
    for path in tiny_base_dir.iterdir():
        if path.name.startswith("tokenizer") or path.suffix == ".jinja":
            shutil.copy(path, out / path.name)
    return out


@pytest.fixture
def four_layer_base_dir(tmp_path, tiny_base_dir):
    """The tiny model with four layers: enough depth to tell one graph per layer from one graph for all."""
    return base_with_layers(tmp_path, tiny_base_dir, 4)


def test_compiled_decoder_layers_follow_the_eager_loss_curve_within_1e_4(tmp_path, four_layer_base_dir, monkeypatch):
    """torch.compile on a CPU (inductor's C++ backend): 8 steps of a 4-layer tiny model, bounded to a minute."""
    tiny_base_dir = four_layer_base_dir
    files = {"train": write_jsonl(tmp_path / "train.jsonl", demo_records(40)), "validation": None}
    eager = loss_curve(tmp_path, tiny_base_dir, files, "lora", True, monkeypatch, reference=False, steps=8)
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = loss_curve(tmp_path, tiny_base_dir, files, "lora", True, monkeypatch, reference=False, steps=8,
                          hardware={"compile": True})
    assert len(compiled) == len(eager) == 8
    # two graphs whatever the depth: the first layer's input needs no gradient under LoRA (frozen embeddings),
    # every later layer's does; a per-layer guard (a KV cache filled layer by layer) would compile each anew
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    for step, (a, b) in enumerate(zip(compiled, eager), start=1):
        assert a == pytest.approx(b, rel=1e-4), f"step {step}: {a} vs {b}"


DEEP_LAYERS = 10  # deeper than dynamo's recompile limit (8): one graph per layer would run the last layers eager


def test_compiled_layers_of_a_model_deeper_than_the_recompile_limit_share_a_few_graphs(
        tmp_path, tiny_base_dir, monkeypatch):
    """hardware.compile, full fine-tuning of a 10-layer model: 3 packed steps and an evaluation, bounded to a minute
    or two. The KV cache (use_cache on) made each layer a graph of its own (a guard on the layer's index into the
    cache), so from the ninth layer on dynamo gave up and ran them eager; with no cache the layers share one graph
    per kind of call, however deep the model is."""
    from torch._dynamo.utils import counters

    base = base_with_layers(tmp_path, tiny_base_dir, DEEP_LAYERS)
    records = demo_records(48)
    files = {"train": write_jsonl(tmp_path / "train.jsonl", records[:40]),
             "validation": write_jsonl(tmp_path / "validation.jsonl", records[40:])}
    work = tmp_path / "deep"
    spec = train_spec(work, base, files, method="full", data={"packing": True},
                      hyperparameters={"max_steps": 3, "batch_size": 2, "gradient_accumulation_steps": 1,
                                       "learning_rate": 2e-3},
                      checkpoint={"every_steps": 3, "keep_last": 1, "keep_best": False}, hardware={"compile": True})
    work.mkdir(parents=True)
    torch._dynamo.reset()
    counters.clear()
    assert torch._dynamo.config.recompile_limit < DEEP_LAYERS
    import hanzo_ml.lora as loop

    # a layer that hits the recompile limit fails the run here instead of falling back to eager unnoticed
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        result = loop.train(load_spec_dict(spec, work), work / "job.json", work / "work")
    assert result["steps"] == 3 and "eval/loss" in result["final_metrics"]
    stats = dict(counters["stats"])
    # training (every layer's input needs a gradient: the embeddings train) and evaluation (no gradients, other
    # lengths); a per-layer graph would need at least DEEP_LAYERS
    assert 1 <= stats["unique_graphs"] <= 3, stats
    assert stats["unique_graphs"] < DEEP_LAYERS


def test_a_training_job_runs_its_model_without_a_kv_cache(tiny_base_dir):
    """apply_plan switches the cache off in the config, so forwards that do not pass use_cache (trl's, the
    model's own generate-free evaluation) skip it too."""
    from hanzo_ml.modeling import load_causal_lm

    model = load_causal_lm(tiny_base_dir)
    assert model.config.use_cache is not False  # the saved model's default: on
    kernels.apply_plan(model, kernels.StepPlan("sdpa", "none"))
    assert model.config.use_cache is False
    batch = {"input_ids": torch.tensor([[1, 5, 6, 7]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    assert model(**batch).past_key_values is None


def test_compiled_layers_take_a_new_flex_block_mask_every_step_without_recompiling(tmp_path, tiny_base_dir):
    """The GPU's compiled plan (FlexAttention + compiled layers): each step's packed rows have other example
    boundaries, so another BlockMask (and mask function); the 10 layers still run one graph for every step. Forward
    only: FlexAttention has no backward on a CPU."""
    from torch._dynamo.utils import counters
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(base_with_layers(tmp_path, tiny_base_dir, DEEP_LAYERS))
    kernels.apply_plan(model, kernels.StepPlan("flex", "none", compile=True, packed_length=256))
    torch._dynamo.reset()
    counters.clear()
    generator = torch.Generator().manual_seed(1)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True), torch.no_grad():
        for _ in range(torch._dynamo.config.recompile_limit + 2):
            cuts = sorted(torch.randint(1, 200, (3,), generator=generator).tolist()) + [200]
            segments = torch.cat([torch.full((end - start,), i) for i, (start, end) in
                                  enumerate(zip([0] + cuts, cuts))] + [torch.full((256 - 200,), -1)])
            positions = torch.cat([torch.arange(end - start) for start, end in zip([0] + cuts, cuts)]
                                  + [torch.zeros(256 - 200, dtype=torch.long)])
            batch = {"input_ids": torch.randint(0, 100, (2, 256), generator=generator),
                     "labels": torch.randint(0, 100, (2, 256), generator=generator),
                     "segment_ids": segments.repeat(2, 1), "position_ids": positions.repeat(2, 1)}
            assert torch.isfinite(kernels.summed_nll(model, batch))
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
