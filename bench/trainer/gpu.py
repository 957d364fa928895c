"""GPU trainer benchmark: our trainer against a plain transformers `Trainer` + peft baseline, same data and
settings, on a ~1.1B-parameter Llama-architecture model made from a config (TinyLlama-1.1B's shape, seeded random
weights, the bundled tokenizer; nothing is downloaded). For full fine-tuning (bf16 mixed precision), LoRA and
QLoRA it records tokens/s, MFU and peak GPU memory, and writes them as the GPU rows of
bench/results/trainer.{json,md} (the CPU rows come from bench/trainer/run.py and are kept).

    $(jq -r .python .bootstrap.json) bench/trainer/gpu.py [--steps 40] [--seq-len 1024] [--rows 8]
    $(jq -r .python .bootstrap.json) bench/trainer/gpu.py --smoke   # a 2-layer model on CPU: checks the harness

Both sides see the same records of examples/data/demo-task.jsonl, tokenized by our chat encoder (loss on the
answers only), the same learning rate, warmup and step count, and about the same tokens per optimizer step. Ours
packs examples into rows of --seq-len tokens (attention kept within each example); the baseline pads each batch to
its longest example, as `DataCollatorForSeq2Seq` does, with as many examples per batch as fill the same tokens.
tokens/s counts non-padding tokens over the training steps after the first --skip (warm-up) steps; MFU is
6 x parameters x tokens/s over the device's peak dense bf16 FLOP/s (--peak-tflops); peak memory is
torch.cuda.max_memory_allocated. Each run is its own process, so one run's memory never counts for another.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

METHODS = ("full", "lora", "qlora")
LEARNING_RATE = {"full": 2e-5, "lora": 2e-4, "qlora": 2e-4}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# TinyLlama-1.1B's shape; the smoke shape only checks that every part runs.
SHAPES = {
    "1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, vocab_size=32000),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=None),
}


# ---- the model and the data ------------------------------------------------------------------------------

def make_model(out: Path, shape: str) -> Path:
    """A Llama model from a config with seeded random weights (bf16 on disk), beside the bundled tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tiny = Path(json.loads((REPO / ".bootstrap.json").read_text())["base_model"])
    out.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny / name).is_file():
            shutil.copy(tiny / name, out / name)
    dims = dict(SHAPES[shape])
    tiny_config = json.loads((tiny / "config.json").read_text())
    dims["vocab_size"] = dims["vocab_size"] or tiny_config["vocab_size"]
    config = LlamaConfig(**dims, max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=tiny_config.get("bos_token_id"), eos_token_id=tiny_config.get("eos_token_id"),
                         pad_token_id=tiny_config.get("pad_token_id"))
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out


def write_splits(work: Path) -> dict[str, Path]:
    lines = [line for line in (REPO / "examples/data/demo-task.jsonl").read_text().splitlines() if line.strip()]
    (work / "train.jsonl").write_text("\n".join(lines[:-64]) + "\n")
    (work / "validation.jsonl").write_text("\n".join(lines[-64:]) + "\n")
    return {"train": work / "train.jsonl", "validation": work / "validation.jsonl"}


# ---- one run of ours -------------------------------------------------------------------------------------

def run_ours(args, model_dir: Path, files: dict[str, Path], work: Path) -> dict:
    from hanzo_ml.lora import train
    from hanzo_ml.recipes.templates import read_template, render, validated

    template = REPO / "recipes" / "tiny" / f"{args.method}.yaml"
    doc = render(read_template(template), str(model_dir), str(files["train"]), str(files["validation"]), str(work))
    hp = doc["hyperparameters"]
    hp.update(max_steps=args.steps, batch_size=args.rows, gradient_accumulation_steps=1, warmup_steps=args.steps // 10,
              max_seq_length=args.seq_len, learning_rate=LEARNING_RATE[args.method])
    if args.method != "full":
        hp.update(lora_rank=16, lora_alpha=32, target_modules=TARGETS)
    doc["data"] = {**doc.get("data", {}), "packing": True}
    doc["hardware"] = {**doc.get("hardware", {}), "device": args.device, "precision": args.precision,
                       "gpus_per_node": 1 if args.device == "cuda" else 0, "device_memory_gb": None,
                       "peak_flops_per_device": args.peak_tflops * 1e12}
    if args.method == "qlora":
        doc["quantization"] = {**doc.get("quantization", {}), "compute_dtype": args.compute_dtype}
    doc["checkpoint"] = {"every_steps": args.steps, "keep_last": 1, "keep_best": False}  # saved at the end only
    doc["threads"] = os.cpu_count() if args.device == "cuda" else 2
    spec = validated(doc, template)
    steps = []
    import hanzo_ml.lora as loop
    original = loop.write_progress

    def record_step(workdir, state, *a, **kw):  # called once per step with the step's metrics
        original(workdir, state, *a, **kw)
        if state.step and (not steps or steps[-1][0] != state.step):
            steps.append((state.step, state.tokens_seen, state.elapsed_seconds))
    loop.write_progress = record_step
    train(spec, template, work / "work")
    return measured(steps, args.skip)


def measured(steps: list[tuple[int, int, float]], skip: int) -> dict:
    """steps: (step, tokens so far, training seconds so far); the first `skip` steps are warm-up."""
    import torch

    (_, tokens0, seconds0), (_, tokens1, seconds1) = steps[min(skip, len(steps) - 2)], steps[-1]
    return {"tokens": tokens1 - tokens0, "seconds": seconds1 - seconds0,
            "tokens_per_second": (tokens1 - tokens0) / max(seconds1 - seconds0, 1e-9),
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


# ---- one run of the baseline -----------------------------------------------------------------------------

def run_baseline(args, model_dir: Path, files: dict[str, Path], work: Path) -> dict:
    import torch
    from transformers import (AutoModelForCausalLM, BitsAndBytesConfig, DataCollatorForSeq2Seq, Trainer,
                              TrainerCallback, TrainingArguments)

    from hanzo_ml.chat import encode_dataset, load_tokenizer, read_chat_jsonl

    tokenizer = load_tokenizer(model_dir)
    examples = encode_dataset(tokenizer, read_chat_jsonl(files["train"]), args.seq_len, "train")
    rows = [{"input_ids": e.input_ids, "labels": e.labels} for e in examples]
    mean_length = sum(len(r["input_ids"]) for r in rows) / len(rows)
    per_batch = max(1, round(args.rows * args.seq_len / mean_length))  # the tokens ours packs into --rows rows

    bf16 = args.precision == "bf16" or (args.precision == "auto" and args.device == "cuda")
    load = {"dtype": torch.float32}
    if args.method == "qlora":
        load["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                                         bnb_4bit_use_double_quant=True,
                                                         bnb_4bit_compute_dtype=getattr(torch, args.compute_dtype))
        load["device_map"] = {"": 0 if args.device == "cuda" else "cpu"}
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, **load)
    if args.method != "full":
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        if args.method == "qlora":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                                                 task_type="CAUSAL_LM"))

    steps: list[tuple[int, int, float]] = []
    counted = {"tokens": 0}

    def collate(batch):
        out = DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=-100)(batch)
        counted["tokens"] += int(out["attention_mask"].sum())
        return out

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.started = time.monotonic()

        def on_step_end(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            seconds = (steps[-1][2] if steps else 0.0) + time.monotonic() - self.started
            steps.append((state.global_step, counted["tokens"], seconds))

    training_args = TrainingArguments(
        output_dir=str(work / "hf"), max_steps=args.steps, per_device_train_batch_size=per_batch,
        gradient_accumulation_steps=1, learning_rate=LEARNING_RATE[args.method], warmup_steps=args.steps // 10,
        lr_scheduler_type="linear", bf16=bf16, use_cpu=args.device == "cpu", logging_strategy="no",
        save_strategy="no", report_to=[], dataloader_drop_last=True, remove_unused_columns=False, seed=42)
    Trainer(model=model, args=training_args, train_dataset=rows, data_collator=collate,
            callbacks=[Clock()]).train()
    # The collator runs a batch ahead (prefetch): tokens are counted when collated, so the counter leads by at
    # most one batch; over the measured steps that is < 1 / steps of the total.
    result = measured(steps, args.skip)
    result["examples_per_batch"] = per_batch
    return result


# ---- the driver ------------------------------------------------------------------------------------------

def child(args) -> None:
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[variable] = "1"
    from hanzo_ml.cli import configure_logging, quiet_transformers
    configure_logging()
    quiet_transformers()
    work = Path(args.work)
    files = {"train": work / "train.jsonl", "validation": work / "validation.jsonl"}
    runner = run_ours if args.system == "hanzo-ml" else run_baseline
    result = runner(args, work / "model", files, work / f"{args.system}-{args.method}")
    Path(args.out).write_text(json.dumps(result))


def parameter_count(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="warm-up steps left out of tokens/s")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=8, help="packed rows of --seq-len tokens per step (ours)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of one device (H100 SXM)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model on CPU: checks the harness only")
    # internal: one run in a child process
    parser.add_argument("--system", choices=["hanzo-ml", "baseline"])
    parser.add_argument("--method", choices=METHODS)
    parser.add_argument("--work")
    parser.add_argument("--out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--compute-dtype", default="bfloat16")
    args = parser.parse_args()
    if args.system:
        return child(args)

    import torch

    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("bench/trainer/gpu.py: no CUDA device on this machine (use --smoke to check the harness on CPU)")
    device, precision, compute = ("cpu", "fp32", "float32") if args.smoke else ("cuda", "bf16", "bfloat16")
    if args.smoke:
        args.steps, args.skip, args.seq_len, args.rows = min(args.steps, 4), 1, 256, 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="hanzo-ml-bench-gpu-") as tmp:
        work = Path(tmp)
        model_dir = make_model(work / "model", "smoke" if args.smoke else "1.1b")
        write_splits(work)
        params = parameter_count(model_dir)
        for method in args.methods.split(","):
            pair = {}
            for system in ("hanzo-ml", "baseline"):
                out = work / f"{system}-{method}.json"
                cmd = [sys.executable, __file__, "--system", system, "--method", method, "--work", str(work),
                       "--out", str(out), "--device", device, "--precision", precision, "--compute-dtype", compute,
                       "--steps", str(args.steps), "--skip", str(args.skip), "--seq-len", str(args.seq_len),
                       "--rows", str(args.rows), "--peak-tflops", str(args.peak_tflops)]
                subprocess.run(cmd, check=True)
                r = json.loads(out.read_text())
                r["mfu"] = 6 * params * r["tokens_per_second"] / (args.peak_tflops * 1e12) if device == "cuda" else None
                pair[system] = r
                print(json.dumps({"method": method, "system": system, **r}), file=sys.stderr)
            rows.append(gpu_row(method, pair))
    gpu = {"device": torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({platform.machine()}, smoke)",
           "parameters": params, "steps": args.steps, "skip": args.skip, "seq_len": args.seq_len, "rows": args.rows,
           "peak_tflops": args.peak_tflops, "smoke": args.smoke, "results": rows,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.smoke:  # the harness ran; its numbers say nothing about a GPU
        print(json.dumps(gpu, indent=2))
    else:
        write_report(gpu)


def gpu_row(method: str, pair: dict) -> dict:
    ours, base = pair["hanzo-ml"], pair["baseline"]
    ratio = ours["tokens_per_second"] / base["tokens_per_second"] if base["tokens_per_second"] else None
    memory = (ours["peak_memory_gib"] / base["peak_memory_gib"]
              if ours["peak_memory_gib"] and base["peak_memory_gib"] else None)
    return {"method": method, "hanzo_ml": ours, "baseline": base, "tokens_per_second_ratio": ratio,
            "peak_memory_ratio": memory}


def write_report(gpu: dict) -> None:
    from run import markdown

    results = REPO / "bench" / "results"
    path = results / "trainer.json"
    report = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    report["gpu"] = gpu
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (results / "trainer.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
