"""QLoRA: LoRA adapters over a base loaded in 4-bit NF4 with double quantization (bitsandbytes), so the frozen
weights take about a quarter of their 16-bit memory. The adapters train in float32; matmuls dequantize the base
to quantization.compute_dtype.

bitsandbytes runs 4-bit layers on a CUDA GPU, or (slowly, fine for tiny models) on an x86-64 CPU with AVX2;
anything else is refused before the model is touched.
"""
from __future__ import annotations

import platform
from pathlib import Path
from types import SimpleNamespace

import torch

from hanzo_ml.errors import InputError
from hanzo_ml.recipes import Recipe
from hanzo_ml.recipes.components import (AdapterWeights, ChatObjective, attach_adapter, frozen_base_dtype,
                                         load_chat_datasets, lora_config)

DEFAULTS = SimpleNamespace(quant_type="nf4", double_quant=True, compute_dtype="bfloat16")


def quantization(spec):
    return spec.quantization if getattr(spec, "quantization", None) is not None else DEFAULTS


def cpu_has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False


def check(spec, spec_path: Path) -> None:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise InputError(f"{spec_path}: method: qlora needs the bitsandbytes package; this environment lacks it") from e
    on_cuda = spec.hardware.device == "cuda" or (spec.hardware.device == "auto" and torch.cuda.is_available())
    if not on_cuda and not (platform.machine() in ("x86_64", "AMD64") and cpu_has_avx2()):
        raise InputError(f"{spec_path}: method: qlora needs a CUDA GPU or an x86-64 CPU with AVX2 for "
                         f"bitsandbytes 4-bit layers; this machine has a {platform.machine()} CPU"
                         f"{'' if platform.machine() != 'x86_64' else ' without AVX2'} and no CUDA device")


def build_model(spec, spec_path: Path, device):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = quantization(spec)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=q.quant_type,
                                bnb_4bit_use_double_quant=q.double_quant,
                                bnb_4bit_compute_dtype=getattr(torch, q.compute_dtype))
    # What is not 4-bit (embeddings, norms, head) is frozen in the forward pass's precision, as LoRA's base is
    # (bf16 on GPUs): no peft.prepare_model_for_kbit_training, whose float32 upcast of those weights makes the
    # whole residual stream float32. A 4-bit layer returns its input's dtype, so each projection's output, the
    # activations kept for the backward pass and every elementwise kernel between the matmuls would run in float32
    # (twice the bytes), with a cast to compute_dtype and back around every projection. peft freezes the base.
    base = AutoModelForCausalLM.from_pretrained(spec.base_model_path, quantization_config=config,
                                                device_map={"": str(device)}, dtype=frozen_base_dtype(spec, device),
                                                local_files_only=True)
    return attach_adapter(base, lora_config(spec.hyperparameters), spec_path, spec.hyperparameters)


RECIPE = Recipe(
    method="qlora",
    data_form="chat",
    load_data=load_chat_datasets,
    build_model=build_model,
    objective=lambda spec, model, data: ChatObjective(data.collate),
    weights=AdapterWeights(),
    check=check,
)
