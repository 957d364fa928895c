"""Memory traffic and operator count of one training step under bf16 autocast, per token, before and after two
changes to how the trainer holds its tensors: full fine-tuning on bf16 weights with float32 masters
(hanzo_ml/master_weights.py) instead of float32 weights under autocast, and adapters that take their input as it
comes instead of peft's float32 copy (recipes.components.keep_adapter_inputs). Every aten operator of the step
(forward, backward, gradient clipping, AdamW, and for bf16 weights the masters' copy into the model) is seen
through a TorchDispatchMode: the bytes it reads (its tensor inputs) and writes (its outputs), the bytes of dtype
casts among them, and how many operators ran (each a kernel on a GPU). These do not depend on the device, so a
CPU measures what a GPU moves; time is not measured here (bench/trainer/gpu.py does that on a GPU). Also the
bytes autograd keeps for the backward pass (each storage once). QLoRA is left out: under autocast on a GPU
peft's bitsandbytes layers already skip the float32 copy (they check autocast on CUDA only, so a CPU would show a
saving a GPU never sees).

    $(jq -r .python .bootstrap.json) bench/trainer/step_traffic.py [--layers 4] [--seq-len 1024] [--rows 4]

Writes bench/results/trainer-step-traffic.{json,md}. The model is made from a config: TinyLlama-1.1B's layer
shape (hidden 2048, MLP 5632, 32 heads, 4 KV heads) with --layers layers, seeded random weights.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "trainer"))
sys.path.insert(0, str(HERE))

from qlora_activations import make_model, spec_for  # noqa: E402

RESULTS = REPO / "bench" / "results"
VARIANTS = {
    "full-fp32-weights": ("full", "full: float32 weights under autocast (before; hardware.weights fp32)"),
    "full-bf16-weights": ("full", "full: bf16 weights, float32 masters (now; hardware.weights auto)"),
    "lora-cast": ("lora", "LoRA: peft casts each adapter's input to float32 (before)"),
    "lora": ("lora", "LoRA: adapters take their bf16 input (now)"),
}
PAIRS = (("full-fp32-weights", "full-bf16-weights"), ("lora-cast", "lora"))


def build(variant: str, model_dir: Path):
    """The model of one variant on the CPU, as the trainer builds it under bf16 precision; the parameters the
    optimizer takes; and the masters object for bf16 weights (None otherwise)."""
    import torch

    from hanzo_ml.master_weights import MasterWeights
    from hanzo_ml.recipes import components, full, lora

    method = VARIANTS[variant][0]
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    spec = spec_for(model_dir, method)
    model = {"full": full, "lora": lora}[method].build_model(spec, Path("job.json"), cpu)
    model.config.use_cache = False
    keep = components.keep_adapter_inputs
    if variant.endswith("-cast"):
        components.keep_adapter_inputs = lambda m: 0  # peft's default: every adapter input copied to float32
    try:
        components.autocast_forward(model, torch.bfloat16)
    finally:
        components.keep_adapter_inputs = keep
    masters = MasterWeights(model) if variant == "full-bf16-weights" else None
    trainable = masters.parameters if masters else [p for p in model.parameters() if p.requires_grad]
    return model, trainable, masters


def step_traffic(model, trainable, masters, rows: int, seq_len: int) -> dict:
    """One optimizer step of the trainer's loss seen operator by operator; bytes per token."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from hanzo_ml import kernels

    generator = torch.Generator().manual_seed(1)
    batch = {"input_ids": torch.randint(0, 32000, (rows, seq_len), generator=generator),
             "attention_mask": torch.ones(rows, seq_len, dtype=torch.long)}
    batch["labels"] = batch["input_ids"].clone()
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, foreach=True)
    phases = {phase: {"ops": 0, "read": 0, "written": 0, "cast_ops": 0, "cast_bytes": 0}
              for phase in ("forward_backward", "update")}
    totals = phases["forward_backward"]

    def nbytes(tree) -> int:
        return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal totals
            out = func(*args, **(kwargs or {}))
            if func._schema.name in ("aten::detach", "aten::view", "aten::t", "aten::_unsafe_view", "aten::alias",
                                     "aten::expand", "aten::transpose", "aten::permute", "aten::slice",
                                     "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::as_strided",
                                     "aten::reshape", "aten::split", "aten::unbind", "aten::split_with_sizes"):
                return out  # views: no kernel, no bytes moved
            read, written = nbytes((args, kwargs)), nbytes(out)
            totals["ops"] += 1
            totals["read"] += read
            totals["written"] += written
            inputs = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
            outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            if func._schema.name in ("aten::_to_copy", "aten::copy_", "aten::_foreach_copy_") and inputs and \
                    outputs and inputs[-1].dtype != outputs[0].dtype:
                totals["cast_ops"] += 1
                totals["cast_bytes"] += read + written
            return out

    saved: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:  # weights are not activations
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with Count():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = kernels.summed_nll(model, kernels.with_loss_positions(batch))
        loss.backward()
        totals = phases["update"]
        torch.nn.utils.clip_grad_norm_(trainable, 1.0, foreach=True)
        optimizer.step()
        if masters:
            masters.copy_to_model()
    tokens = rows * seq_len
    passes, update = phases["forward_backward"], phases["update"]
    trained = sum(p.numel() for p in trainable)
    return {"tokens": tokens, "ops": passes["ops"], "moved_bytes_per_token": round(moved(passes) / tokens),
            "cast_ops": passes["cast_ops"], "cast_bytes_per_token": round(passes["cast_bytes"] / tokens),
            "saved_for_backward_bytes_per_token": round(sum(saved.values()) / tokens),
            "update_ops": update["ops"], "update_moved_bytes_per_trained_parameter": round(moved(update) / trained, 1)}


def moved(phase: dict) -> int:
    return phase["read"] + phase["written"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=4)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-bench-traffic-") as tmp:
        model_dir = make_model(Path(tmp) / "model", args.layers)
        for variant in VARIANTS:
            model, trainable, masters = build(variant, model_dir)
            results[variant] = step_traffic(model, trainable, masters, args.rows, args.seq_len)
            print(json.dumps({variant: results[variant]}), file=sys.stderr, flush=True)
            del model, trainable, masters
    ratios = {now: {key: results[now][key] / results[before][key] if results[before][key] else None
                    for key in ("moved_bytes_per_token", "cast_bytes_per_token", "ops",
                                "saved_for_backward_bytes_per_token", "update_moved_bytes_per_trained_parameter")}
              for before, now in PAIRS}
    report = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "layers": args.layers,
              "seq_len": args.seq_len, "rows": args.rows, "load_average": round(os.getloadavg()[0], 1),
              "torch": torch.__version__, "results": results, "now_over_before": ratios}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainer-step-traffic.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (RESULTS / "trainer-step-traffic.md").write_text(markdown(report), encoding="utf-8")


def markdown(report: dict) -> str:
    lines = ["# One training step's memory traffic under bf16 autocast, before and after", "",
             f"`bench/trainer/step_traffic.py`: TinyLlama-1.1B's layer shape with {report['layers']} layers, "
             f"{report['rows']} rows of {report['seq_len']} tokens, LoRA rank 16 on every projection; the forward and "
             f"backward of the trainer's loss (kernels.summed_nll), then the update (clipping, AdamW, the masters' "
             f"copy); every aten operator counted through a TorchDispatchMode (views excluded); torch "
             f"{report['torch']}; measured {report['measured_at']} on a CPU (load {report['load_average']}): "
             "operators and bytes do not depend on the device or the load, time is not measured. moved = bytes "
             "read + written by every operator (an upper bound on DRAM traffic: caches and fused kernels move "
             "less); casts = dtype conversions; per token = over the step's tokens (weight-sized work, such as "
             "casting every weight once a forward, counts in it at this many tokens a step).", "",
             "| variant | forward+backward operators | moved bytes/token | casts | cast bytes/token | kept for "
             "backward bytes/token | update operators | update bytes/trained parameter |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for variant, r in report["results"].items():
        lines.append(f"| {VARIANTS[variant][1]} | {r['ops']:,} | {r['moved_bytes_per_token']:,} | {r['cast_ops']:,} | "
                     f"{r['cast_bytes_per_token']:,} | {r['saved_for_backward_bytes_per_token']:,} | "
                     f"{r['update_ops']:,} | {r['update_moved_bytes_per_trained_parameter']:,} |")
    lines += ["", "Now / before:", ""]
    for now, ratio in report["now_over_before"].items():
        text = ", ".join(f"{key.replace('_per_token', '').replace('_', ' ')} {value:.2f}x"
                         for key, value in ratio.items() if value is not None)
        lines.append(f"- {VARIANTS[now][1]}: {text}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
