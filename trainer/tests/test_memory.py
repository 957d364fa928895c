"""The memory estimator and the versioned recipe templates: every template validates against the job-spec
contract and carries exactly the estimate the estimator computes for it."""
from __future__ import annotations

from types import SimpleNamespace

import json
import shutil
from pathlib import Path

import pytest

from hanzo_ml.cli import main
from hanzo_ml.errors import InputError
from hanzo_ml.memory import GIB, KNOWN_SHAPES, estimate, shape_from_config
from hanzo_ml.recipes import METHODS
from hanzo_ml.recipes.templates import compute_estimate, placeholder_spec, read_template, update_estimate
from helpers import REPO_DIR, load_spec_dict, train_spec

# Training templates; recipes/eval/ holds evaluation suites, another schema (contracts/eval-suite.ts).
TEMPLATES = sorted(p for p in (REPO_DIR / "recipes").rglob("*.yaml") if "eval" not in p.relative_to(REPO_DIR / "recipes").parts)


def spec_for(tmp_path, method: str, **hardware):
    files = {"train": Path("/data/train.jsonl"), "validation": Path("/data/validation.jsonl")}
    spec = train_spec(tmp_path, Path("/models/base"), files, method=method,
                      hardware={"device": "cuda", "gpus_per_node": 1, **hardware})
    return load_spec_dict(spec, tmp_path)


def test_there_is_a_tiny_template_for_every_method_and_the_spec_000_table_for_7b_and_72b():
    names = {f"{p.parent.name}/{p.stem}" for p in TEMPLATES}
    assert {f"tiny/{m}" for m in METHODS} <= names
    assert {"zen-7b/lora", "zen-7b/full", "zen-72b/lora", "zen-72b/qlora", "zen-72b/full"} <= names


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_template_validates_and_its_estimate_is_what_the_estimator_computes(path):
    template = read_template(path)
    assert path.read_text().startswith("# Run:\n#   python -m hanzo_ml recipe recipes/")
    spec = placeholder_spec(template, path)
    assert spec.method == template["job"]["method"]
    assert template.get("estimate") == compute_estimate(template, path), \
        f"{path}: run `python -m hanzo_ml recipe {path} --update-estimate`"
    assert template["estimate"]["total"] <= spec.hardware.device_memory_gb * GIB, f"{path} does not fit its GPUs"


def test_rendering_a_template_gives_a_job_spec_the_trainer_accepts(tmp_path, capsys):
    out = tmp_path / "job.json"
    code = main(["recipe", str(REPO_DIR / "recipes/tiny/dpo.yaml"), "--base-model", "/models/tiny",
                 "--train", "/data/pairs.jsonl", "--workdir", str(tmp_path / "run"), "--out", str(out)])
    assert code == 0
    job = json.loads(out.read_text())
    assert (job["method"], job["job_name"], job["output_dir"]) == ("dpo", "tiny-dpo-v1", str(tmp_path / "run/output"))
    assert job["preference"] == {"beta": 0.1, "loss_type": "sigmoid"}


def test_a_template_setting_the_contract_rejects_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO_DIR / "recipes/tiny/lora.yaml").read_text().replace("lora_rank: 16", "lora_rank: -1"))
    code = main(["recipe", str(bad), "--base-model", "/m", "--train", "/t.jsonl", "--workdir", "/w"])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"{bad}: hyperparameters.lora_rank: -1 is less than")


def test_update_estimate_rewrites_only_the_estimate_block(tmp_path):
    copy = tmp_path / "lora.yaml"
    shutil.copy(REPO_DIR / "recipes/tiny/lora.yaml", copy)
    original = copy.read_text()
    copy.write_text(original.replace("batch_size: 8 ", "batch_size: 16"))
    numbers = update_estimate(copy)
    assert read_template(copy)["estimate"] == numbers
    assert numbers["activations"] > read_template(REPO_DIR / "recipes/tiny/lora.yaml")["estimate"]["activations"]
    assert copy.read_text().split("# written by")[0] == original.replace("batch_size: 8 ", "batch_size: 16") \
        .split("# written by")[0]


def test_the_tiny_shape_is_the_bundled_base_models():
    from hanzo_ml.base_model import ModelShape

    default, known = ModelShape(), KNOWN_SHAPES["hanzo-tiny-llama"]
    assert (known.hidden_size, known.intermediate_size, known.num_layers, known.num_heads, known.head_dim) == (
        default.hidden_size, default.intermediate_size, default.num_hidden_layers, default.num_attention_heads,
        default.head_dim)


def test_known_shapes_have_the_parameter_counts_their_names_promise():
    assert 7.0e9 < KNOWN_SHAPES["zen-7b"].params < 8.0e9
    assert 71e9 < KNOWN_SHAPES["zen-72b"].params < 74e9


def test_full_fine_tuning_costs_several_times_the_weights_and_lora_little_more_than_them(tmp_path):
    shape = KNOWN_SHAPES["zen-7b"]
    full, lora = (estimate(spec_for(tmp_path, m), shape=shape) for m in ("full", "lora"))
    autocast = estimate(spec_for(tmp_path, "full", weights="fp32"), shape=shape)
    assert lora.weights == shape.params * 2                           # the frozen base in bf16 on a GPU
    assert full.weights == shape.params * 2                           # bf16 weights (hardware.weights auto) ...
    assert full.optimizer == shape.params * 12                        # ... two fp32 AdamW moments, fp32 masters
    assert autocast.weights == shape.params * 4                       # fp32 weights under bf16 autocast
    assert autocast.optimizer == shape.params * 8
    assert lora.trainable_params < shape.params / 100
    # 16 bytes per parameter (ZeRO): 4x the float32 model, spec 000's "3-4x model size"; bf16 weights add 2
    assert autocast.weights + autocast.gradients + autocast.optimizer == 16 * shape.params
    assert full.weights + full.gradients + full.optimizer == 18 * shape.params
    assert lora.gradients + lora.optimizer < lora.weights / 10


def test_qlora_stores_the_projections_in_about_4_and_an_eighth_bits(tmp_path):
    shape = KNOWN_SHAPES["zen-72b"]
    qlora, lora = (estimate(spec_for(tmp_path, m), shape=shape) for m in ("qlora", "lora"))
    other = shape.params - shape.linear_params
    bits = (qlora.weights - other * 2) * 8 / shape.linear_params  # embeddings, norms, head: bf16, as LoRA's base
    assert bits == pytest.approx(4.127, abs=0.001)
    assert qlora.weights < 0.3 * lora.weights  # the 152k-token embeddings and head stay 16-bit


def test_sharding_divides_weights_gradients_and_optimizer_over_every_device(tmp_path):
    shape = KNOWN_SHAPES["zen-72b"]
    one = estimate(spec_for(tmp_path, "full", weights="fp32"), shape=shape)  # across processes weights stay fp32
    sharded = estimate(spec_for(tmp_path, "full", nodes=4, gpus_per_node=8, strategy="fsdp"), shape=shape)
    assert sharded.devices == 32
    assert (sharded.weights, sharded.optimizer) == (int(one.weights / 32), int(shape.params * 8 / 32))
    ddp = estimate(spec_for(tmp_path, "full", nodes=4, gpus_per_node=8), shape=shape)
    assert sharded.activations == ddp.activations  # each device still runs its own micro-batch
    zero2 = estimate(spec_for(tmp_path, "full", nodes=4, gpus_per_node=8, strategy="deepspeed_zero2"), shape=shape)
    # ZeRO-2 keeps whole weights; ZeRO keeps a float32 master copy of each partition next to the two moments
    assert (zero2.weights, zero2.gradients, zero2.optimizer) == (one.weights, int(one.gradients / 32),
                                                                 int(shape.params * 12 / 32))
    zero3 = estimate(spec_for(tmp_path, "full", nodes=4, gpus_per_node=8, strategy="deepspeed_zero3"), shape=shape)
    assert (zero3.weights, zero3.optimizer) == (sharded.weights, int(shape.params * 12 / 32))


def test_a_gpu_run_with_fp32_precision_counts_float32_weights_and_activations(tmp_path):
    shape = KNOWN_SHAPES["zen-7b"]
    bf16 = estimate(spec_for(tmp_path, "lora"), shape=shape)
    fp32 = estimate(spec_for(tmp_path, "lora", precision="fp32"), shape=shape)
    assert fp32.weights == 2 * bf16.weights == shape.params * 4
    assert 1.5 * bf16.activations < fp32.activations <= 2 * bf16.activations  # the logits are fp32 in both


def test_the_largest_micro_batch_that_fits_is_reported_and_fits(tmp_path):
    spec = spec_for(tmp_path, "lora")
    shape = KNOWN_SHAPES["zen-7b"]
    budget = 40 * GIB
    result = estimate(spec, budget, shape)
    assert result.max_micro_batch >= 1
    spec.hyperparameters.batch_size = result.max_micro_batch
    assert estimate(spec, shape=shape).total <= budget
    spec.hyperparameters.batch_size = result.max_micro_batch + 1
    assert estimate(spec, shape=shape).total > budget


def test_preference_methods_need_activations_for_two_answers_per_pair(tmp_path):
    shape = KNOWN_SHAPES["zen-7b"]
    # two nodes: both compute the model's full logits (the chunked loss is a one-process chat path)
    lora, dpo = (estimate(spec_for(tmp_path, m, nodes=2), shape=shape) for m in ("lora", "dpo"))
    assert dpo.activations == 2 * lora.activations


def test_time_and_cost_follow_from_tokens_flops_and_price(tmp_path):
    spec = spec_for(tmp_path, "full", peak_flops_per_device=1e14, price_per_device_hour_usd=2.0)
    shape = KNOWN_SHAPES["zen-7b"]
    result = estimate(spec, shape=shape)
    hp = spec.hyperparameters
    assert result.tokens == hp.max_steps * hp.batch_size * hp.gradient_accumulation_steps * hp.max_seq_length
    expected_hours = result.tokens * 6 * shape.params / (1e14 * 0.4) / 3600
    assert result.hours == pytest.approx(expected_hours, rel=1e-3)
    assert result.cost_usd == pytest.approx(result.hours * 2.0, rel=1e-3)
    assert estimate(spec_for(tmp_path, "full"), shape=shape).cost_usd is None


def test_a_config_without_key_value_heads_counts_every_head():
    shape = shape_from_config({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                               "num_attention_heads": 2})
    assert (shape.num_kv_heads, shape.head_dim) == (2, 4)


def test_an_unknown_model_name_is_refused():
    from hanzo_ml.memory import shape_of

    with pytest.raises(InputError, match="neither a known architecture"):
        shape_of("zen-9000b")


def test_flex_attention_and_the_chunked_loss_shrink_the_activation_estimate(tmp_path):
    from hanzo_ml.memory import LOSS_CHUNK_BYTES, activation_bytes

    shape = KNOWN_SHAPES["zen-7b"]
    sdpa = spec_for(tmp_path, "lora", attention="sdpa")
    flex = spec_for(tmp_path, "lora")
    flex.data.packing = sdpa.data.packing = True
    s, b, h, a = 192, 4, shape.hidden_size, shape.num_heads   # train_spec's max_seq_length, batch_size
    scores = shape.num_layers * s * b * h * 5 * a * s / h    # 16-bit attention scores FlexAttention never stores
    assert activation_bytes(sdpa, shape, b) - activation_bytes(flex, shape, b) == pytest.approx(scores, rel=1e-9)
    one_process = activation_bytes(flex, shape, b)
    flex.hardware.nodes = 2  # distributed: the full float32 logits and their gradient
    full_logits = activation_bytes(flex, shape, b)
    assert full_logits - one_process == pytest.approx(2 * s * b * shape.vocab_size * 4
                                                      - 2 * min(LOSS_CHUNK_BYTES, s * b * shape.vocab_size * 4)
                                                      - s * b * h * 4, rel=1e-9)


def test_on_a_gpu_the_micro_batch_is_the_largest_fitting_divisor_of_the_step(tmp_path, monkeypatch):
    import hanzo_ml.memory as memory

    spec = spec_for(tmp_path, "lora", device_memory_gb=1000.0)
    spec.hyperparameters.batch_size, spec.hyperparameters.gradient_accumulation_steps = 3, 4   # 12 a step
    monkeypatch.setattr(memory, "shape_from_config", lambda config: KNOWN_SHAPES["zen-7b"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec.base_model_path = str(model)
    cuda, cpu = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")
    assert memory.check_fits(spec, "job.json", cuda) == 12          # all of the step fits: no accumulation

    def memory_that_fits(micro_batch: int) -> float:
        spec.hyperparameters.batch_size = micro_batch
        total = memory.estimate(spec, None, KNOWN_SHAPES["zen-7b"]).total
        spec.hyperparameters.batch_size = 3
        return total / GIB

    spec.hardware.device_memory_gb = memory_that_fits(5)
    assert memory.check_fits(spec, "job.json", cuda) == 4           # 5 fits, but 4 divides the step's 12
    spec.hardware.device_memory_gb = memory_that_fits(3)
    spec.hardware.micro_batch = "recipe"
    assert memory.check_fits(spec, "job.json", cuda) == 3
    spec.hardware.micro_batch = "auto"
    spec.hardware.device_memory_gb = 1000.0
    assert memory.check_fits(spec, "job.json", cpu) == 3             # a CPU keeps the recipe's batch_size
