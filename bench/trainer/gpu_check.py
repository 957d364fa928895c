"""The GPU-only parts of the trainer's fast path checked against the reference path, before the GPU benchmark
measures them: FlexAttention's backward and Liger's Triton kernels do not run on a CPU, so trainer/tests cannot.

    python bench/trainer/gpu_check.py --model DIR --device cuda --out check.json

For full (float32, bf16, and bf16 on bf16 weights), LoRA and QLoRA (bf16; QLoRA where bitsandbytes is installed), on a 4-layer model of
the benchmark's width (the tokenizer and config of --model, random weights) and 4 packed rows of 1,024 tokens of the demo task:
the reference path (SDPA with the dense block-diagonal mask, the model's own modules, the loss from the full
logits) and the fast path (the trainer's plan on this device: FlexAttention with the document block mask, Liger
kernels, the chunked loss) compute the loss and the gradients of every trainable weight from the same weights.
In float32 (TF32 off) they must agree within 2e-4 relative (loss) and 1e-2 (the gradients' relative L2 error); in
bf16 autocast, as the benchmark trains, within 1e-2 and 5e-2. Full fine-tuning on bf16 weights (hardware.weights
bf16, the default on a GPU: bf16 weights and residual stream, gradients into float32 masters) is compared with
the float32-weights reference, the masters' gradients against the reference's, within the same 1e-2 and 5e-2 (it
also rounds the weights and the residual stream to bf16: on a CPU, with the bundled tiny model, its gradient error
is 6.8e-3 where bf16 autocast's is 3.0e-3). Every reference is taken before the first fast path
(Liger patches the model classes process-wide). Exits 1 on a mismatch or an
error, after writing the JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "trainer"))

# fp32: a mask that lets one example see another moves the gradients by far more than 1e-2 (the loss of a
# random-weight model hardly moves, so the gradients are the sharper test)
TOLERANCE = {"fp32": {"loss": 2e-4, "grad": 1e-2}, "bf16": {"loss": 1e-2, "grad": 5e-2},
             "bf16-weights": {"loss": 1e-2, "grad": 5e-2}}
CHECK_LAYERS = 4
ROWS, SEQ_LEN = 4, 1024


def small_model(model_dir: Path, out: Path, layers: int) -> Path:
    """The benchmark model's config and tokenizer with CHECK_LAYERS layers and seeded random weights."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    for path in model_dir.iterdir():
        if path.name.startswith("tokenizer") or path.name == "chat_template.jinja":
            shutil.copy(path, out / path.name)
    config = LlamaConfig.from_pretrained(model_dir)
    config.num_hidden_layers = layers
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    return out


def packed_batch(model_dir: Path):
    from hanzo_ml.chat import encode_dataset, load_tokenizer, read_chat_jsonl
    from hanzo_ml.packing import collate_packed, pack

    lines = [line for line in (REPO / "examples/data/demo-task.jsonl").read_text().splitlines() if line.strip()]
    path = Path(model_dir) / "check.jsonl"
    path.write_text("\n".join(lines[:400]) + "\n")
    tokenizer = load_tokenizer(model_dir)
    rows = pack(encode_dataset(tokenizer, read_chat_jsonl(path), SEQ_LEN, str(path)), SEQ_LEN)[:ROWS]
    return collate_packed(rows, tokenizer.pad_token_id or 0)


def build(method: str, precision: str, model_dir: Path, work: Path, device_type: str):
    """The trainer's own recipe builds the model, as a job with this method and precision would."""
    import torch

    from hanzo_ml.recipes import recipe_for
    from hanzo_ml.recipes.components import autocast_forward, resolve_precision
    from hanzo_ml.recipes.templates import read_template, render, validated

    template = REPO / "recipes" / "tiny" / f"{method}.yaml"
    doc = render(read_template(template), str(model_dir), str(model_dir / "check.jsonl"), None, str(work))
    doc["data"] = {**doc.get("data", {}), "packing": True}
    doc["hyperparameters"].update(max_seq_length=SEQ_LEN, lora_rank=16, lora_alpha=32, lora_dropout=0.0,
                                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"])
    doc["hardware"] = {**doc.get("hardware", {}), "device": device_type, "precision": precision,
                       "gpus_per_node": 1 if device_type == "cuda" else 0, "device_memory_gb": None}
    spec = validated(doc, template)
    device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
    model = recipe_for(method).build_model(spec, template, device)
    autocast_forward(model, resolve_precision(spec, device))
    return spec, template, model, device


def loss_and_grads(model, batch, device, masters=None):
    """masters: bf16 weights' float32 masters (hanzo_ml.master_weights), where the gradients end up."""
    import torch

    from hanzo_ml.kernels import summed_nll
    from hanzo_ml.modeling import target_token_count
    from hanzo_ml.recipes.components import to_device

    model.zero_grad(set_to_none=True)
    loss = summed_nll(model, to_device(batch, device)) / target_token_count(batch)
    loss.backward()
    trained = zip(masters.names, masters.parameters) if masters else model.named_parameters()
    grads = {n: p.grad.detach().float().clone() for n, p in trained if p.grad is not None}
    if device.type == "cuda":
        torch.cuda.synchronize()
    return loss.item(), grads


CHECKS = (("full", "fp32"), ("full", "bf16"), ("full", "bf16-weights"), ("lora", "bf16"), ("qlora", "bf16"))


def reference_pass(method: str, precision: str, model_dir: Path, work: Path, batch, device_type: str) -> dict:
    """Build the model as the trainer would and take the reference loss and gradients (kept on the CPU)."""
    from hanzo_ml import kernels

    spec, template, model, device = build(method, precision.removesuffix("-weights"), model_dir, work, device_type)
    head = kernels.fused_loss_head
    kernels.fused_loss_head = lambda m: None            # the full logits, SDPA and the model's own modules
    try:
        loss, grads = loss_and_grads(model, batch, device)
    finally:
        kernels.fused_loss_head = head
    return {"method": method, "precision": precision, "spec": spec, "template": template, "model": model,
            "device": device, "loss": loss, "grads": {n: g.cpu() for n, g in grads.items()}}


def fast_pass(reference: dict, batch) -> dict:
    """The trainer's plan applied to the same model (same weights), then the same loss and gradients."""
    from hanzo_ml import kernels
    from hanzo_ml.master_weights import MasterWeights

    method, precision, model = reference["method"], reference["precision"], reference["model"]
    plan = kernels.plan_step(reference["spec"], reference["template"], reference["device"], "llama")
    kernels.apply_plan(model, plan)
    masters = MasterWeights(model) if precision == "bf16-weights" else None
    started = time.monotonic()
    loss, grads = loss_and_grads(model, batch, reference["device"], masters)
    first_call_seconds = time.monotonic() - started
    expected = reference["grads"]
    if set(grads) != set(expected):
        raise AssertionError(f"{method} {precision}: the fast path trains other weights than the reference: "
                             f"{sorted(set(grads) ^ set(expected))[:4]}")
    difference = sum(float((grads[n].cpu() - expected[n]).pow(2).sum()) for n in grads) ** 0.5
    norm = sum(float(expected[n].pow(2).sum()) for n in grads) ** 0.5
    result = {"method": method, "precision": precision, "attention": plan.attention, "kernels": plan.kernels,
              "chunked_loss": kernels.fused_loss_head(model) is not None, "reference_loss": reference["loss"],
              "fast_loss": loss, "loss_relative_error": abs(loss - reference["loss"]) / abs(reference["loss"]),
              "grad_relative_l2_error": difference / max(norm, 1e-30), "trainable_tensors": len(grads),
              "first_call_seconds": round(first_call_seconds, 2), "tolerance": TOLERANCE[precision]}
    result["ok"] = (result["loss_relative_error"] <= TOLERANCE[precision]["loss"]
                    and result["grad_relative_l2_error"] <= TOLERANCE[precision]["grad"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="the benchmark's model directory (config and tokenizer)")
    parser.add_argument("--device", default="cuda", help="cpu checks the harness: there the plan is the reference's "
                        "attention and kernels, and only the chunked loss differs")
    parser.add_argument("--layers", type=int, default=CHECK_LAYERS)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import tempfile

    import torch

    report = {"checks": [], "errors": []}
    if args.device == "cuda" and not torch.cuda.is_available():
        report["skipped"] = "no CUDA device: the GPU-only paths cannot run here (trainer/tests cover the rest)"
        Path(args.out).write_text(json.dumps(report, indent=2))
        return
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-gpu-check-") as tmp:
        small = small_model(Path(args.model), Path(tmp) / "model", args.layers)
        batch = packed_batch(small)
        # every reference first: Liger patches the model classes process-wide once a fast path is applied
        references = []
        for method, precision in CHECKS:
            try:
                references.append(reference_pass(method, precision, small, Path(tmp) / f"{method}-{precision}",
                                                 batch, args.device))
            except Exception as e:  # e.g. bitsandbytes missing: that check is reported, the others still run
                report["errors"].append(f"{method} {precision} reference: {type(e).__name__}: {e}")
        for reference in references:
            try:
                report["checks"].append(fast_pass(reference, batch))
            except Exception as e:
                report["errors"].append(f"{reference['method']} {reference['precision']} fast path: "
                                        f"{type(e).__name__}: {e}")
            reference.clear()  # the model's memory goes before the next one runs
    report["ok"] = not report["errors"] and all(c["ok"] for c in report["checks"])
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    main()
