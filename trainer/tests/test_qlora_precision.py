"""QLoRA's frozen base outside the 4-bit projections (embeddings, norms, head) is held in the forward pass's
precision, as LoRA's is: under bf16 every 4-bit layer receives and returns bf16, so the residual stream and the
activations kept for the backward pass are bf16, not float32 with a cast around every projection. On CPU
bitsandbytes runs its 4-bit layers with AVX2, so the real loader, peft and bitsandbytes are exercised here; how much
time this saves is measured on a GPU (bench/trainer/gpu.py)."""
from __future__ import annotations

import collections
from pathlib import Path

import pytest
import torch

from hanzo_ml import kernels
from hanzo_ml.chat import encode_dataset, load_tokenizer
from hanzo_ml.modeling import collate
from hanzo_ml.recipes import qlora
from hanzo_ml.recipes.components import attach_adapter, autocast_forward, lora_config

from helpers import demo_records, load_spec_dict, train_spec, write_jsonl

pytestmark = pytest.mark.skipif(not qlora.cpu_has_avx2(), reason="bitsandbytes' CPU 4-bit layers need AVX2")


def qlora_spec(tmp_path: Path, base_dir: Path, precision: str, compute_dtype: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {"train": write_jsonl(tmp_path / "train.jsonl", demo_records(8)), "validation": None}
    spec = train_spec(tmp_path, base_dir, files, method="qlora", hardware={"device": "cpu", "precision": precision})
    spec["validation_path"] = None
    spec["quantization"] = {"compute_dtype": compute_dtype}
    return load_spec_dict(spec, tmp_path)


def built(spec, tmp_path: Path, precision: torch.dtype | None):
    torch.manual_seed(0)  # the adapter's A matrices
    model = qlora.build_model(spec, tmp_path / "job.json", torch.device("cpu"))
    autocast_forward(model, precision)
    return model


def batch_of(base_dir: Path) -> dict[str, torch.Tensor]:
    tokenizer = load_tokenizer(base_dir)
    examples = encode_dataset(tokenizer, [r["messages"] for r in demo_records(4)], 192, "train")
    return kernels.with_loss_positions(collate(examples, tokenizer.pad_token_id))


def dtypes_seen(model, batch) -> tuple[collections.Counter, collections.Counter, torch.Tensor]:
    """(dtypes of the 4-bit layers' inputs and outputs, dtypes of the decoder layers' outputs, the loss) of one
    forward and backward pass of the training loss."""
    import bitsandbytes as bnb

    projections, layers = collections.Counter(), collections.Counter()
    hooks = [m.register_forward_hook(lambda m, args, out: projections.update([(args[0].dtype, out.dtype)]))
             for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    hooks += [layer.register_forward_hook(
        lambda m, args, out: layers.update([(out[0] if isinstance(out, tuple) else out).dtype]))
        for layer in kernels.causal_lm(model).get_decoder().layers]
    loss = kernels.summed_nll(model, batch)
    loss.backward()
    for hook in hooks:
        hook.remove()
    return projections, layers, loss


def test_a_bf16_qlora_job_runs_its_4_bit_layers_and_residual_stream_in_bf16(tmp_path, tiny_base_dir):
    spec = qlora_spec(tmp_path, tiny_base_dir, "bf16", "bfloat16")
    model = built(spec, tmp_path, torch.bfloat16)
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad and type(p).__name__ != "Params4bit"}
    assert frozen == {torch.bfloat16}                 # embeddings, norms, head: not upcast to float32
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}  # the adapters train in fp32
    assert not kernels.causal_lm(model).is_gradient_checkpointing  # recomputation only where the recipe asks

    projections, layers, loss = dtypes_seen(model, batch_of(tiny_base_dir))
    assert set(projections) == {(torch.bfloat16, torch.bfloat16)}, projections  # no cast around any projection
    assert set(layers) == {torch.bfloat16}, layers
    assert sum(projections.values()) == 7 * len(kernels.causal_lm(model).get_decoder().layers)
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)

    # the same loss as the float32 model, within bf16's precision
    reference = built(qlora_spec(tmp_path / "fp32", tiny_base_dir, "fp32", "float32"), tmp_path, None)
    expected = kernels.summed_nll(reference, batch_of(tiny_base_dir))
    assert loss.item() == pytest.approx(expected.item(), rel=2e-2)


def test_a_float32_qlora_job_loads_what_the_k_bit_preparation_loaded_and_computes_the_same_loss(
        tmp_path, tiny_base_dir):
    """CPU and fp32 jobs are unchanged: the float32 base the former peft.prepare_model_for_kbit_training path
    held, the same frozen parameters, bit-identical loss and adapter gradients."""
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    spec = qlora_spec(tmp_path, tiny_base_dir, "fp32", "float32")
    ours = built(spec, tmp_path, None)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(tiny_base_dir, quantization_config=config, device_map={"": "cpu"},
                                                dtype=torch.float32, local_files_only=True)
    base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
    torch.manual_seed(0)
    before = attach_adapter(base, lora_config(spec.hyperparameters), tmp_path / "job.json", spec.hyperparameters)

    def described(model):
        return [(name, p.dtype, p.requires_grad) for name, p in model.named_parameters()]
    assert described(ours) == described(before)
    projections, _, loss = dtypes_seen(ours, batch_of(tiny_base_dir))
    assert set(projections) == {(torch.float32, torch.float32)}
    expected = kernels.summed_nll(before, batch_of(tiny_base_dir))
    expected.backward()
    assert loss.item() == expected.item()
    for (name, a), (_, b) in zip(ours.named_parameters(), before.named_parameters()):
        if a.requires_grad:
            assert torch.equal(a.grad, b.grad), name
