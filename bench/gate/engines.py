"""Helpers of the gate-cost benchmark (bench/gate/run.ts), run with the trainer venv's python:

    PYTHONPATH=trainer python bench/gate/engines.py adapter --base DIR --out DIR [--rank 16 --alpha 32]
    PYTHONPATH=trainer python bench/gate/engines.py throughput --base DIR --heldout FILE.jsonl --candle PATH \
        --tokens-out FILE.json --general examples/heldout/general-text.txt [--max-seq-length 256 --threads 2 --repeats 2]

adapter: a LoRA adapter on the pipeline's default target modules, as `peft` initialises it (B = 0, so it scores
like the base model); the eval job's cost does not depend on the adapter's values, only on its shape.

throughput: the held-out records rendered to token ids with the assistant turns marked, exactly as the merge job
writes them for Candle validation (merge.assistant_targets), then scored by both engines on those same ids, one
sequence at a time: PyTorch through the trainer's sequence_nlls as the eval and merge jobs call it, and again
under torch.inference_mode() (the same forward without autograd bookkeeping); Candle through
`validate --heldout-tokens`, minus the same command without it so that process start and model loading cancel
out. Also what one scoring of the general-text retention set costs in each (the eval job scores it once per
model, whatever the suite size). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch


def make_adapter(a) -> dict:
    from peft import LoraConfig, get_peft_model

    from hanzo_ml.modeling import load_causal_lm

    model = load_causal_lm(Path(a.base))
    config = LoraConfig(r=a.rank, lora_alpha=a.alpha, lora_dropout=0.0, target_modules=a.targets.split(","),
                        task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(a.out)
    return {"adapter": a.out}


def candle_seconds(candle: str, model: Path, tokens: Path | None) -> float:
    args = [candle, "validate", "--model", str(model), "--json"]
    if tokens:
        args += ["--heldout-tokens", str(tokens)]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - start


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def throughput(a) -> dict:
    from hanzo_ml.chat import load_tokenizer, read_chat_jsonl
    from hanzo_ml.merge import assistant_targets, sequence_nlls
    from hanzo_ml.modeling import configure_torch, load_causal_lm

    base = Path(a.base)
    tokenizer = load_tokenizer(base)
    heldout = assistant_targets(tokenizer, read_chat_jsonl(Path(a.heldout)), a.max_seq_length, a.heldout)
    Path(a.tokens_out).write_text(json.dumps(heldout))
    sequences, masks = heldout["sequences"], heldout["target_mask"]
    processed = sum(len(s) for s in sequences)            # every position goes through the forward pass
    scored = sum(sum(m[1:]) for m in masks)                # assistant tokens that count towards perplexity

    configure_torch(a.threads)
    model = load_causal_lm(base)
    sequence_nlls(model, sequences[:4], masks[:4])  # warm-up
    as_eval_job = min(timed(lambda: sequence_nlls(model, sequences, masks)) for _ in range(a.repeats))
    with torch.inference_mode():
        sequence_nlls(model, sequences[:4], masks[:4])
        inference_mode = min(timed(lambda: sequence_nlls(model, sequences, masks)) for _ in range(a.repeats))
    candle = min(candle_seconds(a.candle, base, Path(a.tokens_out)) - candle_seconds(a.candle, base, None)
                 for _ in range(a.repeats))
    general = general_text_cost(a, tokenizer, model, base)

    def engine(seconds: float, **extra) -> dict:
        return {"seconds": seconds, "tokens_per_s": processed / seconds, "scored_tokens_per_s": scored / seconds,
                **extra}

    return {
        "sequences": len(sequences), "processed_tokens": processed, "scored_tokens": scored,
        "repeats": a.repeats, "threads": a.threads,
        "pytorch_eval_job": engine(as_eval_job, torch=torch.__version__, how="hanzo_ml.merge.sequence_nlls as the eval job calls it (autograd on)"),
        "pytorch_inference_mode": engine(inference_mode, torch=torch.__version__, how="the same calls under torch.inference_mode()"),
        "candle": engine(candle, how="hanzo-ml-candle validate --heldout-tokens, minus the run without it"),
        "general_text": general,
    }


def general_text_cost(a, tokenizer, model, base: Path) -> dict:
    """The retention set the eval job scores once per model, whatever the suite size: its size and what one
    scoring of it costs in each engine (one run each; it is the fixed part of the gate's cost)."""
    from hanzo_ml.evaluate import MAX_GENERAL_DOCUMENTS
    from hanzo_ml.merge import general_sequences, sequence_nlls

    sequences = general_sequences(tokenizer, Path(a.general), MAX_GENERAL_DOCUMENTS, a.max_seq_length)
    tokens_path = Path(a.tokens_out).with_name("general-tokens.json")
    tokens_path.write_text(json.dumps({"sequences": sequences}))
    pytorch = timed(lambda: sequence_nlls(model, sequences))
    candle_args = [a.candle, "validate", "--model", str(base), "--json"]
    start = time.perf_counter()
    subprocess.run(candle_args + ["--general-tokens", str(tokens_path)], check=True, capture_output=True)
    candle = time.perf_counter() - start - candle_seconds(a.candle, base, None)
    return {"documents": len(sequences), "tokens": sum(len(s) for s in sequences),
            "pytorch_eval_job_seconds": pytorch, "candle_seconds": candle}


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    ad = sub.add_parser("adapter")
    ad.add_argument("--base", required=True)
    ad.add_argument("--out", required=True)
    ad.add_argument("--rank", type=int, default=16)
    ad.add_argument("--alpha", type=float, default=32)
    ad.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
    th = sub.add_parser("throughput")
    th.add_argument("--base", required=True)
    th.add_argument("--heldout", required=True)
    th.add_argument("--candle", required=True)
    th.add_argument("--tokens-out", required=True)
    th.add_argument("--general", required=True, help="the suite's general text (examples/heldout/general-text.txt)")
    th.add_argument("--max-seq-length", type=int, default=256)
    th.add_argument("--threads", type=int, default=2)
    th.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    print(json.dumps(make_adapter(a) if a.command == "adapter" else throughput(a)))


if __name__ == "__main__":
    main()
