"""What one training forward keeps for the backward pass under bf16 autocast, per token: our LoRA (frozen base in
bf16), QLoRA as the loader prepared it before (peft.prepare_model_for_kbit_training: embeddings, norms and head
upcast to float32) and QLoRA as it loads now (those in bf16, as LoRA's base). The bytes of every tensor autograd
saves (each storage counted once) do not depend on the device, so a CPU measures what a GPU holds; time is not
measured here (bench/trainer/gpu.py does that on a GPU).

    $(jq -r .python .bootstrap.json) bench/trainer/qlora_activations.py [--layers 4] [--seq-len 512] [--rows 2]

Writes bench/results/trainer-qlora-activations.{json,md}. The model is made from a config: TinyLlama-1.1B's
layer shape (hidden 2048, MLP 5632, 32 heads, 4 KV heads) with --layers layers, seeded random weights.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "trainer"))

RESULTS = REPO / "bench" / "results"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_model(out: Path, layers: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers, num_attention_heads=32,
                         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out


def spec_for(model_dir: Path, method: str):
    hp = SimpleNamespace(lora_rank=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                         gradient_checkpointing=False)
    return SimpleNamespace(method=method, base_model_path=str(model_dir), hyperparameters=hp,
                           hardware=SimpleNamespace(precision="bf16"),
                           quantization=SimpleNamespace(quant_type="nf4", double_quant=True, compute_dtype="bfloat16"))


def build(variant: str, model_dir: Path):
    """The model of one variant, on the CPU, with bf16 autocast around its forward as the trainer runs it."""
    import torch

    from hanzo_ml.recipes import lora, qlora
    from hanzo_ml.recipes.components import attach_adapter, autocast_forward, lora_config

    cpu = torch.device("cpu")
    torch.manual_seed(0)
    if variant == "lora":
        model = lora.build_model(spec_for(model_dir, "lora"), Path("job.json"), cpu)
    elif variant == "qlora":
        model = qlora.build_model(spec_for(model_dir, "qlora"), Path("job.json"), cpu)
    else:  # the loader before: float32 load, then the k-bit preparation's upcast
        from peft import prepare_model_for_kbit_training
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                    bnb_4bit_compute_dtype=torch.bfloat16)
        base = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=config, device_map={"": "cpu"},
                                                    dtype=torch.float32, local_files_only=True)
        base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
        spec = spec_for(model_dir, "qlora")
        model = attach_adapter(base, lora_config(spec.hyperparameters), Path("job.json"), spec.hyperparameters)
    autocast_forward(model, torch.bfloat16)
    return model


def saved_bytes(model, rows: int, seq_len: int) -> dict:
    """Bytes autograd keeps for the backward pass of one training loss (each storage once), by dtype."""
    import torch

    from hanzo_ml import kernels

    generator = torch.Generator().manual_seed(1)
    batch = {"input_ids": torch.randint(0, 32000, (rows, seq_len), generator=generator),
             "attention_mask": torch.ones(rows, seq_len, dtype=torch.long)}
    batch["labels"] = batch["input_ids"].clone()
    storages: dict[int, tuple[int, str]] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:  # weights are not activations
            storages[storage.data_ptr()] = (storage.nbytes(), str(tensor.dtype).removeprefix("torch."))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = kernels.summed_nll(model, kernels.with_loss_positions(batch))
    by_dtype: dict[str, int] = {}
    for nbytes, dtype in storages.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
    del loss
    tokens = rows * seq_len
    return {"bytes_per_token": round(sum(by_dtype.values()) / tokens),
            "by_dtype_per_token": {k: round(v / tokens) for k, v in sorted(by_dtype.items())}}


VARIANTS = {"lora": "LoRA (frozen base in bf16)",
            "qlora-before": "QLoRA, loaded before (prepare_model_for_kbit_training: float32 norms, embeddings, head)",
            "qlora": "QLoRA, loaded now (what is not 4-bit in bf16)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--rows", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-bench-qlora-") as tmp:
        model_dir = make_model(Path(tmp) / "model", args.layers)
        for variant in VARIANTS:
            model = build(variant, model_dir)
            results[variant] = saved_bytes(model, args.rows, args.seq_len)
            print(json.dumps({variant: results[variant]}), file=sys.stderr, flush=True)
            del model
    report = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "layers": args.layers,
              "seq_len": args.seq_len, "rows": args.rows, "load_average": round(os.getloadavg()[0], 1),
              "torch": torch.__version__, "results": results,
              "qlora_before_over_lora": results["qlora-before"]["bytes_per_token"] / results["lora"]["bytes_per_token"],
              "qlora_over_lora": results["qlora"]["bytes_per_token"] / results["lora"]["bytes_per_token"]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainer-qlora-activations.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "trainer-qlora-activations.md").write_text(markdown(report), encoding="utf-8")


def markdown(report: dict) -> str:
    lines = ["# QLoRA: activations kept for the backward pass (bf16 autocast)", "",
             f"`bench/trainer/qlora_activations.py`: TinyLlama-1.1B's layer shape with {report['layers']} layers, "
             f"{report['rows']} rows of {report['seq_len']} tokens, LoRA rank 16 on every projection, the trainer's "
             f"loss (kernels.summed_nll); torch {report['torch']}; measured {report['measured_at']} on a CPU "
             f"(load {report['load_average']}): bytes do not depend on the device or the load, time is not measured.",
             "", "| variant | bytes per token | by dtype |", "| --- | ---: | --- |"]
    for variant, r in report["results"].items():
        dtypes = ", ".join(f"{k} {v:,}" for k, v in r["by_dtype_per_token"].items())
        lines.append(f"| {VARIANTS[variant]} | {r['bytes_per_token']:,} | {dtypes} |")
    lines += ["", f"QLoRA before / LoRA: {report['qlora_before_over_lora']:.2f}x; QLoRA now / LoRA: "
                  f"{report['qlora_over_lora']:.2f}x."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
